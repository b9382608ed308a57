//! What the store keeps of a schedule, one value per name: its definition
//! (the last registration's), its next fire time, whether it is paused,
//! its last tick, the ticks decided on but maybe not started, and the
//! count of manual runs.
//!
//! Every change is a compare-and-swap of the whole value (`update`): a
//! worker that fires a tick swaps in the next fire time and the ticks it
//! will start; of two workers that try at once, one swaps and the other
//! reads again and finds the tick taken. Starting the ticks follows the
//! swap, and a crash in between leaves them `pending` in the store for
//! the next worker to start (an idempotent create: a tick started twice
//! is one instance).
//!
//! Encoded as the engine's records are (`codec::encode_record`: a format
//! version byte, then bincode), golden bytes below. A later release that
//! needs more here adds a new value beside this one rather than fields.

use serde::{Deserialize, Serialize};

use super::Definition;
use crate::error::{Error, Result};
use crate::journal::Journal;

/// One schedule's stored state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ScheduleState {
    pub(crate) definition: Definition,
    /// The next tick, seconds since the epoch (`i64::MAX`: none to come).
    pub(crate) next: i64,
    pub(crate) paused: bool,
    /// The last tick fired (not a manual run).
    pub(crate) last_tick: Option<i64>,
    /// Ticks decided on whose instances may not exist yet.
    pub(crate) pending: Vec<i64>,
    /// The second of the last manual run, and how many ran in it.
    pub(crate) manual_at: i64,
    pub(crate) manual_count: u32,
}

impl ScheduleState {
    /// A schedule registered now (`now` seconds since the epoch): its first
    /// tick is the first after now.
    pub(crate) fn new(definition: Definition, next: Option<i64>) -> ScheduleState {
        ScheduleState {
            definition,
            next: next.unwrap_or(i64::MAX),
            paused: false,
            last_tick: None,
            pending: Vec::new(),
            manual_at: 0,
            manual_count: 0,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        crate::codec::encode_record(self)
    }

    fn decode(name: &str, bytes: &[u8]) -> Result<ScheduleState> {
        crate::codec::decode_record(bytes).map_err(|detail| Error::Corrupt {
            what: format!("the stored state of schedule {name:?}"),
            detail,
        })
    }
}

/// What an update decides: to keep the state as it is, or to swap in a
/// new one; either way with an answer.
pub(crate) enum Decision<R> {
    Keep(R),
    Put(ScheduleState, R),
}

/// How many times an update reads again after losing a swap before it
/// gives up (another worker changing the schedule that often is a fault).
const MAX_TRIES: usize = 100;

/// Reads schedule `name`'s state, lets `decide` choose, and swaps in its
/// new state if the stored one did not change meanwhile; else reads again.
pub(crate) async fn update<R>(
    journal: &Journal,
    name: &str,
    mut decide: impl FnMut(Option<&ScheduleState>) -> Result<Decision<R>>,
) -> Result<R> {
    for _ in 0..MAX_TRIES {
        let (bytes, state) = load(journal, name).await?;
        match decide(state.as_ref())? {
            Decision::Keep(answer) => return Ok(answer),
            Decision::Put(new, answer) => {
                if journal
                    .swap_schedule_state(name, bytes.as_deref(), &new.encode())
                    .await?
                {
                    return Ok(answer);
                }
            }
        }
    }
    Err(Error::Store(format!(
        "schedule {name:?} changed under {MAX_TRIES} updates in a row; try again"
    )))
}

/// The stored bytes of `name`'s state, and the state they hold.
pub(crate) async fn load(
    journal: &Journal,
    name: &str,
) -> Result<(Option<Vec<u8>>, Option<ScheduleState>)> {
    let bytes = journal.schedule_state(name).await?;
    let state = bytes
        .as_deref()
        .map(|b| ScheduleState::decode(name, b))
        .transpose()?;
    Ok((bytes, state))
}

/// Every stored schedule, by name; one that does not decode is an error
/// naming it.
pub(crate) async fn all(journal: &Journal) -> Result<Vec<(String, ScheduleState)>> {
    let mut out = Vec::new();
    for (name, bytes) in journal.schedule_states().await? {
        let state = ScheduleState::decode(&name, &bytes)?;
        out.push((name, state));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{CatchUp, Overlap, TimingSpec};

    #[test]
    fn the_encoding_is_pinned() {
        let state = ScheduleState {
            definition: Definition {
                timing: TimingSpec::Every {
                    every: 900,
                    offset: 0,
                },
                catch_up: CatchUp::All { at_most: 3 },
                overlap: Overlap::Skip,
                workflow: "w".into(),
            },
            next: 1_893_456_900,
            paused: true,
            last_tick: Some(1_893_456_000),
            pending: vec![1_893_456_000],
            manual_at: 0,
            manual_count: 0,
        };
        let bytes = state.encode();
        assert_eq!(
            bytes, GOLDEN,
            "the stored encoding of a schedule changed: {bytes:?}"
        );
        assert_eq!(ScheduleState::decode("s", &bytes).unwrap(), state);
        assert!(ScheduleState::decode("s", &bytes[..5]).is_err());
    }

    const GOLDEN: &[u8] = &[
        2, 1, 251, 8, 7, 0, 2, 3, 1, 1, 119, 252, 8, 184, 183, 225, 1, 1, 252, 0, 177, 183, 225, 1,
        252, 0, 177, 183, 225, 0, 0,
    ];
}
