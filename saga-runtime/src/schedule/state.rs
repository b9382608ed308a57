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
//! version byte, then bincode), golden bytes below, in one of two layouts:
//!
//! - [`FIRST_LAYOUT`], the first release's: the state without what came
//!   since. Written whenever the state needs nothing more, so the release
//!   before reads (and fires) every schedule that uses none of it.
//! - [`EXTENDED_LAYOUT`]: the first layout with an [`Extension`] beside
//!   it (a new value rather than fields: the first layout's bytes never
//!   change). Written when a schedule has a jitter, the overlap policy
//!   [`Overlap::QueueOne`](super::Overlap::QueueOne) or a kept tick. The
//!   release before refuses its version byte outright, so it neither
//!   fires such a schedule nor writes over it; it says it cannot read it.
//!
//! - [`RUN_TIME_LAYOUT`]: the extended layout with a [`RunTime`] beside
//!   it: the input of a schedule created at run time
//!   (`engine.schedules().create(..)`), as JSON. Written for every
//!   run-time schedule. The releases before refuse its version byte (the
//!   one before this as a newer release's layout), so none of them fires
//!   a run-time schedule without its input, or writes over it.
//!
//! A layout this release does not know (a newer release's) is answered
//! the same way: an error, and the stored value left as it is, since
//! writing back what it understood of it would drop the rest.

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
    /// The tick kept, by [`Overlap::QueueOne`](super::Overlap::QueueOne),
    /// to start once the previous tick's instance ends. Not in the first
    /// layout: stored in its [`Extension`].
    #[serde(skip)]
    pub(crate) kept: Option<i64>,
}

/// The version byte of the first release's layout.
const FIRST_LAYOUT: u8 = crate::codec::FORMAT_VERSION;

/// The version byte of the layout with an [`Extension`]. Not the next
/// byte, 3: the release before decodes that as its first layout
/// (`codec::SEALED_FORMAT_VERSION`, the same layout), so it could take
/// the extended bytes for a state of its own. It refuses 4.
const EXTENDED_LAYOUT: u8 = crate::codec::SEALED_FORMAT_VERSION + 1;

/// The version byte of the layout with an [`Extension`] and a
/// [`RunTime`]: the next byte, which the release before refuses as a
/// newer release's.
const RUN_TIME_LAYOUT: u8 = EXTENDED_LAYOUT + 1;

/// What the run-time layout adds beside the extended one. Fields are
/// appended only by a new layout version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct RunTime {
    /// The input of every tick's instance, JSON.
    input: Vec<u8>,
}

/// What the extended layout adds beside the first one. Fields are
/// appended only by a new layout version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Extension {
    kept: Option<i64>,
    /// The definition's jitter, milliseconds (0: none).
    jitter_ms: u64,
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
            kept: None,
        }
    }

    /// What the first layout cannot hold, `None` when it holds it all.
    fn extension(&self) -> Option<Extension> {
        let extension = Extension {
            kept: self.kept,
            jitter_ms: self.definition.jitter_ms,
        };
        let needed = self.kept.is_some()
            || self.definition.jitter_ms != 0
            || self.definition.overlap == super::Overlap::QueueOne;
        needed.then_some(extension)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        if let Some(input) = &self.definition.input {
            let extension = Extension {
                kept: self.kept,
                jitter_ms: self.definition.jitter_ms,
            };
            let run_time = RunTime {
                input: input.clone(),
            };
            return crate::codec::encode_record_as(&(self, extension, run_time), RUN_TIME_LAYOUT);
        }
        match self.extension() {
            None => crate::codec::encode_record_as(self, FIRST_LAYOUT),
            Some(extension) => crate::codec::encode_record_as(&(self, extension), EXTENDED_LAYOUT),
        }
    }

    pub(crate) fn decode(name: &str, bytes: &[u8]) -> Result<ScheduleState> {
        let decoded = match bytes.first() {
            Some(&EXTENDED_LAYOUT) => crate::codec::decode_record_as(bytes, EXTENDED_LAYOUT).map(
                |(mut state, extension): (ScheduleState, Extension)| {
                    state.kept = extension.kept;
                    state.definition.jitter_ms = extension.jitter_ms;
                    state
                },
            ),
            Some(&RUN_TIME_LAYOUT) => crate::codec::decode_record_as(bytes, RUN_TIME_LAYOUT).map(
                |(mut state, extension, run_time): (ScheduleState, Extension, RunTime)| {
                    state.kept = extension.kept;
                    state.definition.jitter_ms = extension.jitter_ms;
                    state.definition.input = Some(run_time.input);
                    state
                },
            ),
            Some(&version) if version > RUN_TIME_LAYOUT => Err(format!(
                "layout version {version} is a newer release's; this release leaves it alone (fire it from the newer release's workers, or upgrade)"
            )),
            _ => crate::codec::decode_record(bytes),
        };
        decoded.map_err(|detail| Error::Corrupt {
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
    /// Remove the stored state (a deleted schedule).
    Remove(R),
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
            Decision::Remove(answer) => {
                let Some(old) = bytes.as_deref() else {
                    return Ok(answer);
                };
                if journal.remove_schedule_state(name, old).await? {
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
                jitter_ms: 0,
                input: None,
            },
            next: 1_893_456_900,
            paused: true,
            last_tick: Some(1_893_456_000),
            pending: vec![1_893_456_000],
            manual_at: 0,
            manual_count: 0,
            kept: None,
        };
        let bytes = state.encode();
        assert_eq!(
            bytes, GOLDEN,
            "the stored encoding of a schedule changed: {bytes:?}"
        );
        assert_eq!(ScheduleState::decode("s", &bytes).unwrap(), state);
        assert!(ScheduleState::decode("s", &bytes[..5]).is_err());

        // Queue-one, with a kept tick: the first layout, then the extension.
        let mut queued = state.clone();
        queued.definition.overlap = Overlap::QueueOne;
        queued.kept = Some(1_893_456_900);
        let extended = queued.encode();
        assert_eq!(
            extended, GOLDEN_EXTENDED,
            "the stored encoding of a schedule changed: {extended:?}"
        );
        assert_eq!(ScheduleState::decode("s", &extended).unwrap(), queued);
        // Without a kept tick the policy still needs the extension.
        queued.kept = None;
        assert_eq!(queued.encode()[0], EXTENDED_LAYOUT);
        // So does a jitter, of any policy.
        let mut jittered = state.clone();
        jittered.definition.jitter_ms = 30_000;
        let bytes = jittered.encode();
        assert_eq!(bytes[0], EXTENDED_LAYOUT);
        assert_eq!(bytes[bytes.len() - 4..], [0, 251, 48, 117]);
        assert_eq!(ScheduleState::decode("s", &bytes).unwrap(), jittered);
    }

    #[test]
    fn a_run_time_schedule_has_a_layout_of_its_own() {
        let mut state = ScheduleState::new(
            Definition {
                timing: TimingSpec::Every {
                    every: 900,
                    offset: 0,
                },
                catch_up: CatchUp::Latest,
                overlap: Overlap::Allow,
                workflow: "w".into(),
                jitter_ms: 0,
                input: Some(b"[1]".to_vec()),
            },
            Some(900),
        );
        state.kept = Some(7);
        let bytes = state.encode();
        assert_eq!(
            bytes, GOLDEN_RUN_TIME,
            "the stored encoding of a schedule changed: {bytes:?}"
        );
        assert_eq!(ScheduleState::decode("s", &bytes).unwrap(), state);
        // The release before reads it as a newer release's layout: refused.
        let refused = crate::codec::decode_record::<ScheduleState>(&bytes);
        assert!(refused.is_err());
        assert!(
            crate::codec::decode_record_as::<(ScheduleState, Extension)>(&bytes, EXTENDED_LAYOUT)
                .is_err()
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(ScheduleState::decode("s", &longer).is_err());
    }

    /// The first layout (every 900 s, the default policies), then the
    /// extension (kept tick 7, no jitter), then the input `[1]`.
    const GOLDEN_RUN_TIME: &[u8] = &[
        5, 1, 251, 8, 7, 0, 1, 0, 1, 119, 251, 8, 7, 0, 0, 0, 0, 0, 1, 14, 0, 3, 91, 49, 93,
    ];

    #[test]
    fn a_layout_of_a_newer_release_is_refused_not_misread() {
        let mut newer = GOLDEN.to_vec();
        newer[0] = RUN_TIME_LAYOUT + 1;
        let refused = ScheduleState::decode("s", &newer).unwrap_err().to_string();
        assert!(refused.contains("newer release"), "{refused}");
        // The release before takes the extended layout for no state of its
        // own: its decoding (`codec::decode_record`) refuses the version.
        assert!(crate::codec::decode_record::<ScheduleState>(GOLDEN_EXTENDED).is_err());
        // Bytes after the extension (a field a layout added) are refused too.
        let mut longer = GOLDEN_EXTENDED.to_vec();
        longer.push(0);
        assert!(ScheduleState::decode("s", &longer).is_err());
    }

    const GOLDEN: &[u8] = &[
        2, 1, 251, 8, 7, 0, 2, 3, 1, 1, 119, 252, 8, 184, 183, 225, 1, 1, 252, 0, 177, 183, 225, 1,
        252, 0, 177, 183, 225, 0, 0,
    ];

    /// The first layout (overlap 2, `QueueOne`), then the kept tick and
    /// no jitter.
    const GOLDEN_EXTENDED: &[u8] = &[
        4, 1, 251, 8, 7, 0, 2, 3, 2, 1, 119, 252, 8, 184, 183, 225, 1, 1, 252, 0, 177, 183, 225, 1,
        252, 0, 177, 183, 225, 0, 0, 1, 252, 8, 184, 183, 225, 0,
    ];
}
