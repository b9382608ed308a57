//! Runs: an instance that continues as new (`ctx.continue_as_new`) ends
//! its run and begins the next with a new input and an empty journal,
//! under the same id.
//!
//! **Layout.** Both stores key a journal `(id, seq)`. The run is the high
//! 32 bits of `seq`: run `r` holds `r << 32 ..= r << 32 | 0xFFFF_FFFF`.
//! Run 0 is the layout of every release before, byte for byte, so no
//! store is rewritten (the "migration" is a no-op by construction), and a
//! PostgreSQL `bigint` holds runs up to 2^31 - 1. A run is one range of
//! keys: loading an instance reads its current run alone (the run of its
//! last record), and retention removes the runs before it with one range
//! delete.
//!
//! **The hand-over.** One kind of record, [`Continued`], written twice
//! with the same content: as the last record of the run that ends (the
//! hand-over), then as the first record of the next run, at its start.
//! Both are written under the instance's lock, one after the other. A
//! crash between them leaves a run that ends in a hand-over and no next
//! run: whoever loads the instance to write it (its driver after a crash,
//! a send) begins that run first, from the hand-over record alone
//! ([`Journal::begin_pending_run`]). So every crash leaves exactly one
//! next run, and nothing is ever written after a hand-over in its run.
//!
//! **The release before** reads the whole journal from seq 0: it meets
//! the hand-over at the end of run 0, a kind it does not know, and leaves
//! the instance alone as a newer release's (`change`), before the gap to
//! run 1 could look like damage.
//!
//! What a run carries over: the workflow, its new input, when the
//! instance was created, its tags and parent, its place in its queue (it
//! keeps its slot), the events sent to it that no wait took yet, and the
//! ids of events sent with an id within the deduplication window (a send
//! repeated across runs is still recognised). What it does not: its
//! steps, their compensations, its generation (restarts) and patches.
//!
//! **The deduplication window.** Each remembered event id keeps when it
//! was sent, on the engine's clock. A hand-over carries only the ids sent
//! less than the window ago (`EngineBuilder::DEFAULT_EVENT_DEDUP_WINDOW` unless the
//! engine says otherwise), so an entity that loops for ever hands over
//! what its senders sent in one window, not all it was ever sent. Within
//! a run nothing is dropped: an id is remembered until the run ends. A
//! send of an id that was dropped is a new event. A hand-over the
//! release before wrote (`ContinuedAsNew`, no send times) counts its ids
//! as sent at its own time: they are kept one more window.

use super::change::{Change, Entry};
use super::handover::{CarriedEventId, CarriedSpot, Continued, LAST_RUN, run_of, start};
use super::machine;
use super::state::InstanceState;
use super::{Cached, Indexed, Journal, Loaded, corrupt};
use crate::codec::Payload;
use crate::error::{Error, Result};

/// How long an event id is remembered across runs by default: 7 days, as
/// long as an ended instance is kept (the default retention), so a send
/// retried late is recognised as long by an instance that loops as by one
/// that ended. Senders that retry sit well inside it (webhook providers
/// retry for up to about three days; payment APIs keep idempotency keys
/// from 24 hours to 7 days). The cost: each hand-over carries the ids sent
/// in one window, with their payloads.
pub(crate) const DEFAULT_EVENT_DEDUP_WINDOW: std::time::Duration =
    std::time::Duration::from_secs(7 * 24 * 60 * 60);

impl Continued {
    /// The hand-over of the run of `state` to the next, with `input`,
    /// written `now`: it carries the event ids sent less than `window`
    /// before.
    pub(crate) fn of(
        state: &InstanceState,
        input: Payload,
        now: u64,
        window: std::time::Duration,
    ) -> Result<Continued> {
        if state.run >= LAST_RUN {
            return Err(Error::InvalidArgument(format!(
                "the instance is in run {}, the last a store can key: start a new instance instead of continuing this one",
                state.run
            )));
        }
        Ok(Continued {
            run: state.run + 1,
            workflow: state.workflow.clone(),
            input,
            created_at: state.created_at,
            parent: state.parent.clone(),
            tags: state
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            queue: state.queue.as_ref().map(|q| CarriedSpot {
                queue: q.queue.clone(),
                key: q.key.clone(),
                priority: q.priority,
                order: q.order,
                taken: q.taken,
            }),
            pending: state
                .pending
                .values()
                .map(|p| (p.event_type.clone(), p.payload.clone(), p.sent_at))
                .collect(),
            event_ids: state
                .event_ids
                .iter()
                .filter(|(_, e)| within(e.sent_at, now, window))
                .map(|(id, e)| CarriedEventId {
                    id: id.clone(),
                    event_type: e.event_type.clone(),
                    payload: e.payload.clone(),
                    sent_at: e.sent_at,
                })
                .collect(),
        })
    }
}

/// Whether an id sent at `sent_at` was sent less than `window` before
/// `now` (one sent after `now`, by a clock that moved back, is).
fn within(sent_at: u64, now: u64, window: std::time::Duration) -> bool {
    let window = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    now.saturating_sub(sent_at) < window
}

impl Journal {
    /// `ctx.continue_as_new(input)`: ends the current run of `id` (a
    /// driver keeps it) and begins the next with `input` (see the module).
    pub(crate) fn continue_as_new(&self, id: &str, input: Payload) -> Result<()> {
        let now = self.now_millis();
        self.write_kept(id, |state| {
            let continued = Continued::of(state, input, now, self.event_dedup_window())?;
            Ok((Some(Change::ContinuedAsNewDated(Box::new(continued))), ()))
        })
    }

    /// Begins the run that the loaded state's run handed over to, when it
    /// did and the next run is not written yet (a crash came between the
    /// two records), on a store this engine writes; a reader sees the run
    /// that handed over, `Running`, until then.
    pub(super) fn begin_pending_run(&self, id: &str, cached: &mut Cached) -> Result<()> {
        let Some(loaded) = cached.loaded.as_mut() else {
            return Ok(());
        };
        let Some(next) = loaded.state.handed_over.clone() else {
            return Ok(());
        };
        if !self.store.owns(id) {
            return Ok(());
        }
        let seq = start(next.run);
        let record = Entry {
            at: self.now_millis(),
            change: Change::ContinuedAsNewDated(next),
        };
        let mut begun = None;
        let events = machine::apply(&mut begun, seq, &record).map_err(|e| corrupt(id, seq, e))?;
        let Some(begun) = begun else {
            return Err(corrupt(
                id,
                seq,
                "the first record of a run made no instance".into(),
            ));
        };
        let written = self.sealer.encode_record(&record).and_then(|bytes| {
            let indexed = Indexed::of(&begun, seq);
            self.store.append_indexed(id, seq, &bytes, &indexed.row())
        });
        if let Err(e) = written {
            cached.invalidate();
            return Err(e);
        }
        tracing::debug!(instance = %id, run = begun.run, "continued as new");
        self.publish(id, &begun, record.at, events);
        *loaded = Loaded {
            state: begun,
            next_seq: seq + 1,
        };
        Ok(())
    }
}

impl Journal {
    /// Retention of a long loop: removes the runs of `id` that ended
    /// `expired` (a run ends when the next begins), even while its current
    /// run goes on; `true` when there were runs to remove. Only the
    /// instance's writer removes them (on a store shared by workers, its
    /// owner). Run starts grow with the run number, so the newest expired
    /// one is found in a few reads.
    pub(crate) async fn remove_ended_runs(
        &self,
        id: &str,
        expired: impl Fn(u64) -> bool,
    ) -> Result<bool> {
        if !self.store.owns(id) {
            return Ok(false);
        }
        let Some(last) = self.store.last_seq(id).await? else {
            return Ok(false);
        };
        // The newest run in `1..=current` that began `expired`: every run
        // before it ended then. A run retention removed reads as expired.
        let (mut below, mut above) = (0, run_of(last) + 1);
        while above - below > 1 {
            let run = below + (above - below) / 2;
            if self.run_began_expired(id, run, &expired).await? {
                below = run;
            } else {
                above = run;
            }
        }
        if below == 0 {
            return Ok(false);
        }
        self.store.remove_before(id, start(below))?;
        Ok(true)
    }

    /// Whether run `run` of `id` began `expired`, or is gone.
    async fn run_began_expired(
        &self,
        id: &str,
        run: u32,
        expired: &impl Fn(u64) -> bool,
    ) -> Result<bool> {
        let first = self
            .store
            .journal_range(id, start(run)..start(run) + 1)
            .await?;
        let Some((_, bytes)) = first.first() else {
            return Ok(true);
        };
        // A record that does not read is kept, with what it ends.
        Ok(self
            .sealer
            .decode_record::<Entry>(bytes)
            .is_ok_and(|entry| expired(entry.at)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::journal::handover::seqs_of;
    use crate::store::{SledStore, Store};

    /// Instance "i" (input 1) whose journal ends with `hand_over` (made
    /// from its state), written at `at` alone, as a crash right after it
    /// leaves it; and a journal opened on the store again.
    async fn reopened_after_a_lone_hand_over(
        at: u64,
        hand_over: impl FnOnce(&InstanceState) -> Change,
    ) -> (Arc<dyn Store>, Journal) {
        let store: Arc<dyn Store> = Arc::new(SledStore::temporary().unwrap());
        let clock = Arc::new(crate::time::clock::TestClock::new());
        let patience = std::time::Duration::from_secs(5);
        let journal = Journal::new(store.clone(), clock.clone(), patience).unwrap();
        let input = Payload::Json(b"1".to_vec());
        journal
            .create_then("i", "w", input, None, false, |_, _| Ok((None, ())))
            .await
            .unwrap();
        let state = journal.state("i").await.unwrap().unwrap();
        let record = Entry {
            at,
            change: hand_over(&state),
        };
        store
            .append("i", 1, &journal.sealer().encode_record(&record).unwrap())
            .unwrap();
        store.flush().unwrap();
        drop(journal);
        let journal = Journal::new(store.clone(), clock, patience).unwrap();
        (store, journal)
    }

    /// A crash between the hand-over and the next run's first record: the
    /// next load begins the run from the hand-over alone, once.
    #[tokio::test]
    async fn a_hand_over_without_its_next_run_begins_it_on_load() {
        let (store, journal) = reopened_after_a_lone_hand_over(5, |state| {
            let window = super::DEFAULT_EVENT_DEDUP_WINDOW;
            let next = Continued::of(state, Payload::Json(b"2".to_vec()), 5, window).unwrap();
            Change::ContinuedAsNewDated(Box::new(next))
        })
        .await;
        let state = journal.state("i").await.unwrap().unwrap();
        assert_eq!(state.run, 1);
        assert_eq!(state.input.decode::<u32>(), Ok(2));
        assert_eq!(state.status, crate::model::status::Status::Running);
        assert_eq!(store.last_seq("i").await.unwrap(), Some(start(1)));
        let history = journal.history("i").await.unwrap();
        assert_eq!(
            history.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
            [crate::model::history::EventKind::ContinuedAsNew { run: 1 }]
        );
        // Run 0 is kept whole, and ends with the hand-over.
        assert_eq!(store.journal_range("i", seqs_of(0)).await.unwrap().len(), 2);
    }

    /// A hand-over the release before wrote (no send times), after which
    /// it crashed: this release begins the next run from it, dated, its
    /// ids counted as sent at the hand-over.
    #[tokio::test]
    async fn a_hand_over_of_the_release_before_begins_its_run_with_dated_ids() {
        use crate::journal::handover::ContinuedUndated;
        let (store, journal) = reopened_after_a_lone_hand_over(7, |_| {
            let undated = ContinuedUndated {
                run: 1,
                workflow: "w".into(),
                input: Payload::Json(b"2".to_vec()),
                created_at: 0,
                parent: None,
                tags: Vec::new(),
                queue: None,
                pending: Vec::new(),
                event_ids: vec![("evt".into(), "e".into(), Payload::Json(b"8".to_vec()))],
            };
            Change::ContinuedAsNew(Box::new(undated))
        })
        .await;
        let state = journal.state("i").await.unwrap().unwrap();
        assert_eq!(state.run, 1);
        let sent = &state.event_ids["evt"];
        assert_eq!((sent.event_type.as_str(), sent.sent_at), ("e", 7));
        // The run it began is this release's record.
        let first = store.journal_range("i", seqs_of(1)).await.unwrap();
        let entry: Entry = journal.sealer().decode_record(&first[0].1).unwrap();
        let Change::ContinuedAsNewDated(begun) = entry.change else {
            panic!("{entry:?}");
        };
        assert_eq!(begun.event_ids[0].sent_at, 7);
    }

    /// A hand-over carries the ids sent less than the window before it,
    /// with their send times, and drops the older ones.
    #[test]
    fn a_hand_over_carries_only_the_ids_sent_within_the_window() {
        use crate::journal::state::SentEvent;
        let mut state = InstanceState::created("w", &Payload::Json(b"1".to_vec()), 0);
        let hour = 60 * 60 * 1000;
        for (id, sent_at) in [("old", 0), ("edge", hour), ("new", 2 * hour)] {
            let sent = SentEvent {
                event_type: "e".into(),
                payload: Payload::Json(b"8".to_vec()),
                sent_at,
            };
            state.event_ids.insert(id.into(), sent);
        }
        let window = std::time::Duration::from_secs(60 * 60);
        let next = Continued::of(&state, Payload::Json(b"2".to_vec()), 2 * hour, window).unwrap();
        let carried: Vec<_> = next
            .event_ids
            .iter()
            .map(|e| (e.id.as_str(), e.sent_at))
            .collect();
        // Sent exactly one window before: out.
        assert_eq!(carried, [("new", 2 * hour)]);
        // A clock that moved back keeps what it cannot date as old.
        let next = Continued::of(&state, Payload::Json(b"2".to_vec()), 0, window).unwrap();
        assert_eq!(next.event_ids.len(), 3);
    }

    #[test]
    fn run_0_is_the_layout_of_every_release_before() {
        assert_eq!(start(0), 0);
        assert_eq!(run_of(0), 0);
        assert_eq!(run_of(u64::from(u32::MAX)), 0);
        assert_eq!(start(1), 1 << 32);
        assert_eq!(run_of((3 << 32) | 7), 3);
        assert_eq!(seqs_of(2), (2 << 32)..(3 << 32));
        // The last run's keys fit a PostgreSQL bigint.
        assert!(i64::try_from(seqs_of(LAST_RUN).end - 1).is_ok());
    }
}
