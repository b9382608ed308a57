//! The records of an instance's journal: one named intent per durable
//! change. Private and apart from the public [`EventKind`]: the history a
//! user sees is derived from these (`machine`), so the on-disk
//! format can grow without changing the API, and the other way round.
//!
//! The rules for a new kind of record (child workflows, queues,
//! schedules, patches and continue-as-new each bring some):
//!
//! - **Append only.** A new kind is a new variant at the end of [`Change`]
//!   (bincode stores a variant by its index), with golden bytes in the
//!   tests below, and [`Change::KINDS`] counts it. Existing variants, the
//!   index `Summary`, `Status` and `StepError` never gain fields: a field
//!   added there changes the bytes the release before reads.
//! - **Not mine.** A release that meets a record past its last kind (or of
//!   a newer format version) knows a newer release wrote it
//!   ([`crate::codec::from_newer_release`]): it answers
//!   `Error::NewerRelease` for the instance and leaves it alone, neither
//!   running it nor parking it, and a worker of a store shared by workers
//!   does not claim it (its row says which record kinds it needs). A
//!   record that does not decode and is *not* of a newer kind is damage,
//!   and parks the instance (see `fold`).
//!
//! [`EventKind`]: crate::model::history::EventKind

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::handover::{Continued, ContinuedUndated};
pub(crate) use super::state::EventId;
use super::state::SlotKind;
use super::upgrade::legacy::Imported;
use crate::codec::Payload;
use crate::error::failure::{Failure, StepError};
use crate::model::status::Status;
use crate::seal::CarriesPayloads;

/// One journal record: when, and what changed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Milliseconds since the Unix epoch, on the engine's clock.
    pub(crate) at: u64,
    pub(crate) change: Change,
}

impl Change {
    /// How many kinds of record this release knows: the variants below.
    /// Append a variant, and this grows with it.
    pub(crate) const KINDS: u32 = crate::codec::RECORD_KINDS;

    /// Whether the record changes what `list()` filters on though the
    /// status stays: its index entry is written with it.
    ///
    /// Every kind of record newer than the release before is written with
    /// its index entry too, even when the entry does not change: on a store
    /// shared by workers that write is what raises the instance's `needs`,
    /// so a worker of the release before does not claim it.
    pub(crate) fn reindexes(&self) -> bool {
        matches!(
            self,
            Change::Described { .. }
                | Change::CompensationFailed { .. }
                | Change::ChildStarted { .. }
                | Change::ChildEnded { .. }
                | Change::Recalled { .. }
                | Change::RecallEnded { .. }
                | Change::PausedWithParent
                | Change::WaitStartedWithRollback { .. }
                | Change::CreatedOnQueue { .. }
                | Change::Dequeued
                | Change::EventRejected { .. }
                | Change::Patched { .. }
                | Change::SlotReleased
                | Change::Requeued
                | Change::StepFailureValue { .. }
                | Change::ContinuedAsNew(_)
                | Change::Published { .. }
                | Change::ContinuedAsNewDated(_)
                | Change::UpdateReplied { .. }
        )
    }
}

/// The user values of a record, for the engine's codec (`crate::seal`).
/// Every variant is named, so a new one decides whether it holds any.
impl CarriesPayloads for Entry {
    fn payloads_mut(&mut self) -> Vec<&mut Payload> {
        match &mut self.change {
            Change::Created { input, .. } | Change::CreatedOnQueue { input, .. } => vec![input],
            Change::StepStarted { input, .. } => input.iter_mut().collect(),
            Change::StepCompleted { output, .. } => vec![output],
            Change::EventReceived { payload, .. } | Change::EventReceivedWithId { payload, .. } => {
                vec![payload]
            }
            Change::FailureValue { value } | Change::StepFailureValue { value, .. } => vec![value],
            Change::Ended(end) => end.output.iter_mut().collect(),
            Change::ChildEnded { output, value, .. } => {
                output.iter_mut().chain(value.iter_mut()).collect()
            }
            // The first release's records, imported as they were: in the
            // clear already, and never written again.
            Change::Imported(_)
            | Change::DriverStarted
            | Change::StepRetrying { .. }
            | Change::StepFailed { .. }
            | Change::SleepStarted { .. }
            | Change::SleepCompleted { .. }
            | Change::WaitStarted { .. }
            | Change::EventTaken { .. }
            | Change::WaitTimedOut { .. }
            | Change::ValueRecorded { .. }
            | Change::Paused
            | Change::Unpaused
            | Change::RollbackStarted { .. }
            | Change::CompensationStarted { .. }
            | Change::CompensationRetrying { .. }
            | Change::CompensationCompleted { .. }
            | Change::CompensationFailed { .. }
            | Change::Restarted { .. }
            | Change::Blocked { .. }
            | Change::RollbackRetried => Vec::new(),
            // Tags are what `list()` filters on, in the index: searchable,
            // so not sealed (the README says to keep secrets out of them).
            Change::Described { .. } => Vec::new(),
            // Ids and names only: the child's input is in its own journal.
            Change::ChildStarted { .. }
            | Change::Recalled { .. }
            | Change::RecallEnded { .. }
            | Change::PausedWithParent
            | Change::WaitStartedWithRollback { .. }
            | Change::Dequeued => Vec::new(),
            // The decode error only: the payload was the event's, which
            // its own record holds (sealed).
            Change::EventRejected { .. } => Vec::new(),
            // A name from the code.
            Change::Patched { .. } => Vec::new(),
            Change::SlotReleased | Change::Requeued => Vec::new(),
            // The next run's input, and the events it carries over.
            Change::ContinuedAsNew(continued) => continued.payloads_mut(),
            Change::Published { value, .. } => vec![value],
            Change::ContinuedAsNewDated(continued) => continued.payloads_mut(),
            Change::UpdateReplied { reply, .. } => vec![reply],
        }
    }
}

/// What changed. Slots are the durable calls of the workflow code, by call
/// order (see `context`); a compensation is keyed by its step's slot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Change {
    /// `engine.start` stored the instance.
    Created {
        workflow: String,
        input: Payload,
    },
    /// The instance as the first release stored it (upgrade on open).
    Imported(Box<Imported>),
    /// A process began (or, after a restart, resumed) running it.
    DriverStarted,
    /// A step was called (its start order is its slot order).
    StepStarted {
        slot: u32,
        name: String,
        occurrence: u32,
        has_rollback: bool,
        /// The step's inputs, when the step records them.
        input: Option<Payload>,
    },
    /// An attempt failed; the next may start at `retry_at`.
    StepRetrying {
        slot: u32,
        attempt: u32,
        error: StepError,
        retry_at: u64,
        delay: Duration,
    },
    StepCompleted {
        slot: u32,
        output: Payload,
        attempts: u32,
    },
    StepFailed {
        slot: u32,
        error: StepError,
        attempts: u32,
    },
    SleepStarted {
        slot: u32,
        name: String,
        occurrence: u32,
        wake_at: u64,
    },
    SleepCompleted {
        slot: u32,
    },
    WaitStarted {
        slot: u32,
        name: String,
        occurrence: u32,
        event_type: String,
        deadline: u64,
    },
    /// `engine.send_event` stored an event; its id is this record's seq.
    EventReceived {
        event_type: String,
        payload: Payload,
    },
    /// A wait took the pending event `event`.
    EventTaken {
        slot: u32,
        event: EventId,
    },
    WaitTimedOut {
        slot: u32,
    },
    /// `ctx.now()` or `ctx.random()` recorded a value.
    ValueRecorded {
        slot: u32,
        kind: SlotKind,
        value: u64,
    },
    /// A user paused the instance.
    Paused,
    /// A user resumed it.
    Unpaused,
    /// The workflow is failing (or was terminated with rollback): steps in
    /// flight are stopped for good, and the compensations begin.
    RollbackStarted {
        cause: Failure,
        then: Status,
    },
    CompensationStarted {
        slot: u32,
    },
    CompensationRetrying {
        slot: u32,
        attempt: u32,
        retry_at: u64,
    },
    CompensationCompleted {
        slot: u32,
    },
    CompensationFailed {
        slot: u32,
        error: String,
    },
    /// The one way an instance ends.
    Ended(Box<End>),
    /// A user restarted the instance, from the beginning (`from_slot` 0) or
    /// from a step's slot; a new generation begins.
    Restarted {
        from_slot: u32,
        from_step: Option<String>,
    },
    /// The workflow code no longer matches the history, or a stored value
    /// no longer decodes: the instance is parked until a decision.
    Blocked {
        failure: Failure,
    },
    /// `retry_rollback()`: the compensations that did not complete run
    /// again, with the same keys.
    RollbackRetried,
    /// The workflow returned its own (typed) error, as JSON: written just
    /// before the `RollbackStarted` or `Ended` that carries its failure,
    /// which it belongs to. Kept apart from [`Failure`], whose bincode
    /// layout records of this format already use.
    FailureValue {
        value: Payload,
    },
    /// `send_event` with an event id stored an event (as `EventReceived`)
    /// and its id, so a second send with that id is recognised.
    EventReceivedWithId {
        event_type: String,
        payload: Payload,
        event_id: String,
    },
    /// What the instance is about, beside its input: tags given at start
    /// or by `ctx.tag` (each replaces the value of its key), and the
    /// instance that started it. It takes no slot, so a workflow that
    /// tags where it did not before still replays.
    Described {
        parent: Option<String>,
        tags: Vec<(String, String)>,
    },
    /// `ctx.child` was called: recorded before the child instance `child`
    /// (of workflow `workflow`) is created, so a replay finds it by its id
    /// and never starts a second. `rollback`: the parent's rollback
    /// compensates it.
    ChildStarted {
        slot: u32,
        name: String,
        occurrence: u32,
        workflow: String,
        child: String,
        rollback: bool,
    },
    /// The child of slot `slot` ended: its outcome, as the parent's call
    /// returns it (`value`: the child's typed error, as JSON).
    ChildEnded {
        slot: u32,
        status: Status,
        output: Option<Payload>,
        failure: Option<Failure>,
        value: Option<Payload>,
    },
    /// A completed instance is undone: its parent rolls back, so its own
    /// compensations run (`cause`: why), and it ends `Compensated`.
    Recalled {
        cause: Failure,
    },
    /// The compensations that `Recalled` began are over: `Ok`, or the one
    /// that gave up. The instance is `Compensated`.
    RecallEnded {
        rollback: Result<(), Failure>,
    },
    /// Its parent was paused, and so it was: the parent's resume resumes
    /// it, where a pause of its own stays.
    PausedWithParent,
    /// A wait began, as `WaitStarted`, with a compensation registered
    /// (`on_rollback`): when the instance rolls back and the wait had
    /// received its event, the compensation gets the event's payload.
    WaitStartedWithRollback {
        slot: u32,
        name: String,
        occurrence: u32,
        event_type: String,
        deadline: u64,
    },
    /// `engine.start_on` stored the instance, as `Created` does, waiting
    /// in `queue` for a slot: no driver runs it before `Dequeued`. `order`
    /// is its place among its queue's instances of equal priority on a
    /// store of one process (a store shared by workers orders them by a
    /// sequence of its own).
    CreatedOnQueue {
        workflow: String,
        input: Payload,
        queue: String,
        key: Option<String>,
        priority: i32,
        order: u64,
    },
    /// It took a slot of its queue, and holds it until it ends (a restart
    /// puts it back in the queue).
    Dequeued,
    /// The wait of `slot` set the pending event `event` aside: its payload
    /// does not decode as the wait's type (`error` says why). It is no
    /// longer pending; the wait goes on.
    EventRejected {
        slot: u32,
        event: EventId,
        error: String,
    },
    /// `ctx.patched(name)` answered true here: the instance runs the
    /// patched code from now on, and its replays answer true again. Takes
    /// no slot.
    Patched {
        name: String,
    },
    /// It gave its queue's slot back while it only waits (its queue says
    /// `release_while_waiting`): it holds none until its wait is over,
    /// `Requeued`, and takes one again (`Dequeued`).
    SlotReleased,
    /// The wait it gave its slot back for is over: it waits in its queue
    /// again (`Queued`), to go on from that wait once it takes a slot.
    Requeued,
    /// The step of `slot` gave up with its own (typed) error, as JSON:
    /// written just before the `StepFailed` of that slot, which it belongs
    /// to, so a replay hands the workflow the same typed failure
    /// (`StepFailed::downcast`). Kept apart from `StepError`, whose bincode
    /// layout records of this format already use.
    StepFailureValue {
        slot: u32,
        value: Payload,
    },
    /// `ctx.continue_as_new(input)`: the run ends and the next begins with
    /// a new input and an empty journal (see `runs`). Written twice with
    /// the same content: the last record of the run that ends (the
    /// hand-over), then the first of the next run, at `handover::start(run)`.
    /// The release before wrote it, carrying every event id ever sent, with
    /// no send time; this release reads it (the ids count as sent at the
    /// record's time) and writes `ContinuedAsNewDated`.
    ContinuedAsNew(Box<ContinuedUndated>),
    /// `ctx.publish(name, value)`: the latest value of `name` is `value`
    /// for readers outside (`Instance::published`). Takes no slot: the
    /// state counts a generation's publishes of each name, so a replay
    /// that publishes again a value this generation recorded writes
    /// nothing (see `workflow::publishing`).
    Published {
        name: String,
        value: Payload,
    },
    /// The hand-over of `ContinuedAsNew`, written as it is (twice), whose
    /// event ids carry when each was sent: a run hands over only the ids
    /// sent within the engine's deduplication window, so a loop that
    /// continues for ever carries a bounded set (see `runs`).
    ContinuedAsNewDated(Box<Continued>),
    /// The workflow answered the update `update_id` (`Update::reply`):
    /// the caller of `Instance::update` gets `reply`. Takes no slot: the
    /// state keeps each update's reply by its id, so a replay that replies
    /// again writes nothing, and a caller that retries with the same id
    /// reads this reply (see `workflow::updates`).
    UpdateReplied {
        update_id: String,
        reply: Payload,
    },
}

/// How an instance ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct End {
    /// `Complete`, `Errored` or `Terminated`.
    pub(crate) status: Status,
    pub(crate) output: Option<Payload>,
    /// Why it failed (`Errored`).
    pub(crate) failure: Option<Failure>,
    /// How its rollback ended, when one ran: `Ok` or the compensation
    /// that gave up.
    pub(crate) rollback: Option<Result<(), Failure>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_record, encode_record};
    use crate::error::failure::FailureKind;

    fn bytes(change: Change) -> Vec<u8> {
        let entry = Entry { at: 1000, change };
        let bytes = encode_record(&entry);
        let back: Entry = decode_record(&bytes).expect("decodes");
        assert_eq!(encode_record(&back), bytes);
        bytes
    }

    /// The last variant is the last kind [`Change::KINDS`] counts: a
    /// variant appended without counting it fails here.
    #[test]
    fn the_last_kind_of_record_is_counted() {
        let last = bytes(update_replied());
        // The version, `at` (1000 as a varint: 251, 232, 3), then the kind.
        assert_eq!(u32::from(last[4]), Change::KINDS - 1);
        assert!(!crate::codec::from_newer_release(&last, 1, Change::KINDS));
        let mut newer = last.clone();
        newer[4] = Change::KINDS as u8;
        assert!(crate::codec::from_newer_release(&newer, 1, Change::KINDS));
    }

    /// The release before knew 38 kinds: the hand-over that ends run 0 is
    /// a newer release's record to it (not its own), never damage, and it
    /// meets it before the gap to run 1.
    #[test]
    fn the_release_before_takes_a_hand_over_for_a_newer_releases_record() {
        let hand_over = bytes(Change::ContinuedAsNew(Box::new(continued())));
        assert!(crate::codec::from_newer_release(&hand_over, 1, 38));
    }

    /// The release before knew 42 kinds: a published value is a newer
    /// release's record to it, so it leaves the instance alone.
    #[test]
    fn the_release_before_takes_a_published_value_for_a_newer_releases_record() {
        assert!(crate::codec::from_newer_release(&bytes(published()), 1, 42));
    }

    /// The release before knew 43 kinds: a hand-over with dated event ids
    /// is a newer release's record to it, so it leaves the instance alone
    /// (and meets it before the gap to the next run).
    #[test]
    fn the_release_before_takes_a_dated_hand_over_for_a_newer_releases_record() {
        let hand_over = bytes(Change::ContinuedAsNewDated(Box::new(continued_dated())));
        assert!(crate::codec::from_newer_release(&hand_over, 1, 43));
        assert!(!crate::codec::from_newer_release(&hand_over, 1, 44));
    }

    /// A hand-over the release before wrote still reads, byte for byte
    /// (the golden bytes below), and its event ids count as sent when the
    /// record was written.
    #[test]
    fn a_hand_over_of_the_release_before_reads_with_its_ids_sent_at_its_time() {
        let written_before = [
            2, 251, 232, 3, 41, 1, 1, b'w', 1, 1, b'7', 9, 1, 1, b'p', 1, 1, b'k', 1, b'v', 1, 1,
            b'q', 0, 2, 3, 1, 1, 1, b'e', 1, 1, b'8', 5, 1, 1, b'i', 1, b'e', 1, 1, b'8',
        ];
        let entry: Entry = decode_record(&written_before).expect("decodes");
        let Change::ContinuedAsNew(undated) = &entry.change else {
            panic!("{entry:?}");
        };
        let dated = undated.dated(entry.at);
        assert_eq!(dated.run, 1);
        assert_eq!(
            dated.pending,
            [("e".into(), Payload::Json(b"8".to_vec()), 5)]
        );
        let [carried] = dated.event_ids.as_slice() else {
            panic!("{:?}", dated.event_ids);
        };
        assert_eq!(
            (carried.id.as_str(), carried.event_type.as_str()),
            ("i", "e")
        );
        assert_eq!(carried.payload, Payload::Json(b"8".to_vec()));
        assert_eq!(carried.sent_at, 1000);
    }

    /// The release before knew 44 kinds: an update's reply is a newer
    /// release's record to it, so it leaves the instance alone.
    #[test]
    fn the_release_before_takes_an_update_reply_for_a_newer_releases_record() {
        let reply = bytes(update_replied());
        assert!(crate::codec::from_newer_release(&reply, 1, 44));
        assert!(!crate::codec::from_newer_release(&reply, 1, 45));
    }

    /// The reply `9` to the update `"u"`.
    fn update_replied() -> Change {
        Change::UpdateReplied {
            update_id: "u".into(),
            reply: Payload::Json(b"9".to_vec()),
        }
    }

    /// A published value, `"p"` = `7`.
    fn published() -> Change {
        Change::Published {
            name: "p".into(),
            value: Payload::Json(b"7".to_vec()),
        }
    }

    /// A store shared by workers reads from a record's header alone how
    /// many kinds a release must know to read it (its instance's `needs`),
    /// whatever the size of the entry's time.
    #[cfg(feature = "postgres")]
    #[test]
    fn a_records_header_says_which_kinds_it_needs() {
        use crate::codec::{encode_record, kinds_needed};
        for at in [0, 1000, 70_000, 1_796_113_299_473, u64::MAX] {
            let described = encode_record(&Entry {
                at,
                change: Change::Described {
                    parent: None,
                    tags: Vec::new(),
                },
            });
            assert_eq!(kinds_needed(&described), 28, "at {at}");
            let paused = encode_record(&Entry {
                at,
                change: Change::PausedWithParent,
            });
            assert_eq!(kinds_needed(&paused), 33, "at {at}");
            let dequeued = encode_record(&Entry {
                at,
                change: Change::Dequeued,
            });
            assert_eq!(kinds_needed(&dequeued), 36, "at {at}");
            let rejected = encode_record(&Entry {
                at,
                change: Change::EventRejected {
                    slot: 0,
                    event: (1, 0),
                    error: String::new(),
                },
            });
            assert_eq!(kinds_needed(&rejected), 37, "at {at}");
            let patched = encode_record(&Entry {
                at,
                change: Change::Patched { name: "p".into() },
            });
            assert_eq!(kinds_needed(&patched), 38, "at {at}");
            let requeued = encode_record(&Entry {
                at,
                change: Change::Requeued,
            });
            assert_eq!(kinds_needed(&requeued), 40, "at {at}");
            let step_failure_value = encode_record(&Entry {
                at,
                change: Change::StepFailureValue {
                    slot: 1,
                    value: Payload::Json(b"7".to_vec()),
                },
            });
            assert_eq!(kinds_needed(&step_failure_value), 41, "at {at}");
            let continued = encode_record(&Entry {
                at,
                change: Change::ContinuedAsNew(Box::new(continued())),
            });
            assert_eq!(kinds_needed(&continued), 42, "at {at}");
            let published = encode_record(&Entry {
                at,
                change: published(),
            });
            assert_eq!(kinds_needed(&published), 43, "at {at}");
            let dated = encode_record(&Entry {
                at,
                change: Change::ContinuedAsNewDated(Box::new(continued_dated())),
            });
            assert_eq!(kinds_needed(&dated), 44, "at {at}");
            let replied = encode_record(&Entry {
                at,
                change: update_replied(),
            });
            assert_eq!(kinds_needed(&replied), 45, "at {at}");
            let started = encode_record(&Entry {
                at,
                change: Change::DriverStarted,
            });
            assert_eq!(kinds_needed(&started), 3, "at {at}");
        }
        assert_eq!(kinds_needed(&[]), 0);
        assert_eq!(kinds_needed(&[crate::codec::FORMAT_VERSION, 253, 1]), 0);
    }

    /// If this fails, journals written by earlier builds no longer read:
    /// bump the format version and read both, instead of changing bytes.
    #[test]
    fn golden_bytes_of_journal_records() {
        assert_eq!(
            bytes(Change::StepCompleted {
                slot: 2,
                output: Payload::Json(b"7".to_vec()),
                attempts: 1,
            }),
            [2, 251, 232, 3, 5, 2, 1, 1, b'7', 1]
        );
        let end = End {
            status: Status::Errored,
            output: None,
            failure: Some(Failure::new(FailureKind::Workflow, "no")),
            rollback: Some(Ok(())),
        };
        assert_eq!(
            bytes(Change::Ended(Box::new(end))),
            [2, 251, 232, 3, 21, 6, 0, 1, 0, 2, b'n', b'o', 1, 0]
        );
        assert_eq!(
            bytes(Change::Described {
                parent: Some("p".into()),
                tags: vec![("k".into(), "v".into())],
            }),
            [2, 251, 232, 3, 27, 1, 1, b'p', 1, 1, b'k', 1, b'v']
        );
        assert_eq!(
            bytes(Change::ChildStarted {
                slot: 1,
                name: "f".into(),
                occurrence: 0,
                workflow: "w".into(),
                child: "p.f".into(),
                rollback: true,
            }),
            [
                2, 251, 232, 3, 28, 1, 1, b'f', 0, 1, b'w', 3, b'p', b'.', b'f', 1
            ]
        );
        assert_eq!(
            bytes(Change::ChildEnded {
                slot: 1,
                status: Status::Compensated,
                output: None,
                failure: None,
                value: None,
            }),
            [2, 251, 232, 3, 29, 1, 9, 0, 0, 0]
        );
        assert_eq!(
            bytes(Change::Recalled {
                cause: Failure::new(FailureKind::Workflow, "no"),
            }),
            [2, 251, 232, 3, 30, 0, 2, b'n', b'o']
        );
        assert_eq!(
            bytes(Change::RecallEnded { rollback: Ok(()) }),
            [2, 251, 232, 3, 31, 0]
        );
        assert_eq!(bytes(Change::PausedWithParent), [2, 251, 232, 3, 32]);
        assert_eq!(
            bytes(Change::WaitStartedWithRollback {
                slot: 2,
                name: "w".into(),
                occurrence: 0,
                event_type: "e".into(),
                deadline: 9,
            }),
            [2, 251, 232, 3, 33, 2, 1, b'w', 0, 1, b'e', 9]
        );
        assert_eq!(
            bytes(Change::CreatedOnQueue {
                workflow: "w".into(),
                input: Payload::Json(b"7".to_vec()),
                queue: "q".into(),
                key: Some("k".into()),
                priority: -1,
                order: 3,
            }),
            [
                2, 251, 232, 3, 34, 1, b'w', 1, 1, b'7', 1, b'q', 1, 1, b'k', 1, 3
            ]
        );
        assert_eq!(bytes(Change::Dequeued), [2, 251, 232, 3, 35]);
        assert_eq!(
            bytes(Change::EventRejected {
                slot: 4,
                event: (9, 1),
                error: "no".into(),
            }),
            [2, 251, 232, 3, 36, 4, 9, 1, 2, b'n', b'o']
        );
        assert_eq!(
            bytes(Change::Patched {
                name: "fraud".into()
            }),
            [2, 251, 232, 3, 37, 5, b'f', b'r', b'a', b'u', b'd']
        );
        assert_eq!(bytes(Change::SlotReleased), [2, 251, 232, 3, 38]);
        assert_eq!(bytes(Change::Requeued), [2, 251, 232, 3, 39]);
        assert_eq!(
            bytes(Change::StepFailureValue {
                slot: 3,
                value: Payload::Json(b"{}".to_vec()),
            }),
            [2, 251, 232, 3, 40, 3, 1, 2, b'{', b'}']
        );
        assert_eq!(
            bytes(Change::ContinuedAsNew(Box::new(continued()))),
            [
                2, 251, 232, 3, 41, 1, 1, b'w', 1, 1, b'7', 9, 1, 1, b'p', 1, 1, b'k', 1, b'v', 1,
                1, b'q', 0, 2, 3, 1, 1, 1, b'e', 1, 1, b'8', 5, 1, 1, b'i', 1, b'e', 1, 1, b'8'
            ]
        );
        assert_eq!(
            bytes(published()),
            [2, 251, 232, 3, 42, 1, b'p', 1, 1, b'7']
        );
        assert_eq!(
            bytes(update_replied()),
            [2, 251, 232, 3, 44, 1, b'u', 1, 1, b'9']
        );
        // As `ContinuedAsNew`, each event id followed by when it was sent
        // (600_000 as a varint: 252, then 4 bytes).
        assert_eq!(
            bytes(Change::ContinuedAsNewDated(Box::new(continued_dated()))),
            [
                2, 251, 232, 3, 43, 1, 1, b'w', 1, 1, b'7', 9, 1, 1, b'p', 1, 1, b'k', 1, b'v', 1,
                1, b'q', 0, 2, 3, 1, 1, 1, b'e', 1, 1, b'8', 5, 1, 1, b'i', 1, b'e', 1, 1, b'8',
                252, 0xC0, 0x27, 0x09, 0x00
            ]
        );
    }

    /// A hand-over from run 0 as the release before wrote it, with one of
    /// everything it carries.
    fn continued() -> ContinuedUndated {
        ContinuedUndated {
            run: 1,
            workflow: "w".into(),
            input: Payload::Json(b"7".to_vec()),
            created_at: 9,
            parent: Some("p".into()),
            tags: vec![("k".into(), "v".into())],
            queue: Some(crate::journal::handover::CarriedSpot {
                queue: "q".into(),
                key: None,
                priority: 1,
                order: 3,
                taken: true,
            }),
            pending: vec![("e".into(), Payload::Json(b"8".to_vec()), 5)],
            event_ids: vec![("i".into(), "e".into(), Payload::Json(b"8".to_vec()))],
        }
    }

    /// [`continued`] as this release writes it: its id sent at 600 s.
    fn continued_dated() -> Continued {
        continued().dated(600_000)
    }

    /// The kinds this release adds are written with the index entry, which
    /// raises the instance's `needs` on a store shared by workers.
    #[test]
    fn every_new_kind_of_record_raises_what_its_instance_needs() {
        let failure = || Failure::new(FailureKind::Workflow, "no");
        let new_kinds = [
            Change::ChildStarted {
                slot: 0,
                name: "f".into(),
                occurrence: 0,
                workflow: "w".into(),
                child: "p.f".into(),
                rollback: false,
            },
            Change::ChildEnded {
                slot: 0,
                status: Status::Complete,
                output: None,
                failure: None,
                value: None,
            },
            Change::Recalled { cause: failure() },
            Change::RecallEnded {
                rollback: Err(failure()),
            },
            Change::PausedWithParent,
            Change::CreatedOnQueue {
                workflow: "w".into(),
                input: Payload::Json(b"null".to_vec()),
                queue: "q".into(),
                key: None,
                priority: 0,
                order: 0,
            },
            Change::Dequeued,
            Change::EventRejected {
                slot: 0,
                event: (1, 0),
                error: "no".into(),
            },
            Change::Patched { name: "p".into() },
            Change::SlotReleased,
            Change::Requeued,
            Change::StepFailureValue {
                slot: 0,
                value: Payload::Json(b"1".to_vec()),
            },
            Change::ContinuedAsNew(Box::new(continued())),
            published(),
            Change::ContinuedAsNewDated(Box::new(continued_dated())),
            update_replied(),
        ];
        for change in new_kinds {
            assert!(change.reindexes(), "{change:?}");
        }
    }
}
