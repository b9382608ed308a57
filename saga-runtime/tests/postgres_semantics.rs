//! The core semantics suite again, on PostgreSQL: steps, retries,
//! rollback order, child workflows, waits and timers, control, `Engine::idle`, retention, limits, patches, published state, updates with a reply, typed failures, the replay check, continue-as-new, queues, tags and search, schedules (the cost
//! of the 2,000th event included). The files are the
//! same as the sled suite's; in this binary `helpers::fresh` gives each
//! engine a schema of its own on the test database instead of a temporary
//! sled store (tests that reopen a sled directory still run on sled).
#![cfg(feature = "postgres")]
// Each file brings the shared helpers as it does in its own binary.
#![allow(clippy::duplicate_mod)]

#[path = "children.rs"]
mod children;
#[path = "continue_as_new.rs"]
mod continue_as_new;
#[path = "control.rs"]
mod control;
#[cfg(feature = "encryption")]
#[path = "encryption.rs"]
mod encryption;
#[path = "events.rs"]
mod events;
#[path = "idle.rs"]
mod idle;
#[path = "limits.rs"]
mod limits;
#[path = "patches.rs"]
mod patches;
#[path = "published.rs"]
mod published;
#[path = "queue_control.rs"]
mod queue_control;
#[path = "queues.rs"]
mod queues;
#[path = "replay_check.rs"]
mod replay_check;
#[path = "retention.rs"]
mod retention;
#[path = "rollback/main.rs"]
mod rollback;
#[path = "schedules.rs"]
mod schedules;
#[path = "search.rs"]
mod search;
#[path = "steps.rs"]
mod steps;
#[path = "timers.rs"]
mod timers;
#[path = "typed_failures.rs"]
mod typed_failures;
#[path = "updates.rs"]
mod updates;
