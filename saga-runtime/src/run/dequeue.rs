//! The dispatcher: the task that hands the free slots of each declared
//! queue to waiting instances (in the order of `queue::order`) and starts
//! their drivers. An instance on a queue gets a driver only once it holds
//! a slot ([`Dispatch::admits`](crate::run::dispatch::Dispatch::admits) says so to the runner), and holds it until
//! it ends; its `Dequeued` record is the slot, so the slots held are
//! derived from the journals and a crash leaks none.
//!
//! On a store of one process the waiting instances and the holders of
//! slots are kept in memory ([`Local`]), rebuilt from the journals when
//! the engine opens. On a store shared by workers the store takes them,
//! checking every limit in the transaction that takes them
//! ([`Store::take_queued`](crate::store::Store::take_queued)), so any
//! worker with room takes any worker's queued instances.
//!
//! A queue's rate limit holds instances back until its window moves on:
//! the dispatcher then sleeps until then on the engine's clock, as well
//! as waiting to be poked.

use std::sync::Arc;

use crate::error::Result;
use crate::journal::Change;
use crate::lock::lock;
use crate::model::status::Status;
use crate::run::dispatch::waiting;
use crate::run::runner::Runner;
use crate::time::clock::{Sleep, from_millis};

/// Notes instance `id`, just started on a queue, as waiting before its
/// start returns, on a store of one process: first come, first served
/// then holds between starts made one after the other even while slots
/// (or the rate) are free, which the driver task that notes it too does
/// not promise. What it read may be stale: one the dispatcher took
/// meanwhile holds its slot, and stays a holder. (A shared store keeps
/// the order itself.)
pub(crate) async fn note_started(runner: &Arc<Runner>, id: &str) {
    let journal = &runner.core.journal;
    if journal.shared() {
        return;
    }
    let Ok((Some(spot), status)) = journal.read(id, |s| (s.queue.clone(), s.status)).await else {
        return;
    };
    if spot.taken || status != Status::Queued {
        return;
    }
    if let Some(queue) = lock(&runner.queues.local).get_mut(&spot.queue) {
        queue.arrive(waiting(id, &spot));
    }
    runner.queues.poke();
}

/// Starts the dispatcher, when the engine declared queues and writes.
pub(crate) fn spawn_dispatcher(runner: &Arc<Runner>) {
    if runner.queues.queues.is_empty() || runner.core.journal.read_only() {
        return;
    }
    let weak = Arc::downgrade(runner);
    let poke = runner.queues.poke.clone();
    let mut ends = runner.core.journal.subscribe_ends();
    // Other workers' instances that end free slots too.
    let mut told = runner.core.journal.changes(crate::store::Told::Stops);
    let poll = runner.core.poll;
    let clock = runner.core.clock.clone();
    let shared = runner.core.journal.shared();
    let task = runner.core.spawn(async move {
        if !shared {
            let Some(runner) = weak.upgrade() else { return };
            if let Err(e) = rebuild(&runner).await {
                tracing::error!(error = %e, "could not read the queued instances; they wait until the engine opens again");
                return;
            }
        }
        // Real time: on a shared store, how often to look at other
        // workers' queued instances and ends.
        let mut every = tokio::time::interval(poll);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let rate_opens_at = {
                let Some(runner) = weak.upgrade() else { return };
                if runner.core.is_closed() || runner.core.is_draining() {
                    return;
                }
                let taken = if shared {
                    take_shared(&runner).await
                } else {
                    take_local(&runner).await
                };
                taken.unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "could not hand out the slots of queues; trying again");
                    None
                })
            };
            // A timeout on the engine's clock, not a sleep: a test clock
            // that skips to sleeps must not skip a rate's window, and with
            // it every other instance's time.
            let window_moves: Sleep = match rate_opens_at {
                Some(at) => clock.timeout_at(from_millis(at)),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                // Each leads to the same look at the queues.
                // Biased: a simulated run picks the same on every replay of its seed.
                biased;
                () = poke.notified() => {}
                changed = ends.changed() => if changed.is_err() { return },
                Some(()) = crate::journal::told_of_change(&mut told) => {}
                _ = every.tick() => {}
                () = window_moves => {}
            }
        }
    });
    runner.core.track(task);
}

/// On open (a store of one process): who waits in each queue, in order,
/// and who holds its slots, from the journals of the unfinished
/// instances; and, for queues with a rate, the starts within its window,
/// from the journals of the instances that ended within it too.
async fn rebuild(runner: &Arc<Runner>) -> Result<()> {
    let journal = &runner.core.journal;
    let now = journal.now_millis();
    let longest_window = runner
        .queues
        .queues
        .all()
        .filter_map(|q| q.limits().rate)
        .map(|rate| rate.per_ms)
        .max();
    for (id, summary) in journal.summaries().await? {
        let Ok(summary) = summary else { continue };
        let ended = summary.status.is_terminal();
        // One that ended before the window began started before it too.
        let ended_within_window = longest_window.is_some_and(|per| {
            summary
                .finished_at
                .is_some_and(|at| at.saturating_add(per) > now)
        });
        if ended && !ended_within_window {
            continue;
        }
        let read = journal
            .read(&id, |s| (s.queue.clone(), s.status, s.took_slot_at.clone()))
            .await;
        let Ok((Some(spot), status, took_slot_at)) = read else {
            continue;
        };
        let mut local = lock(&runner.queues.local);
        let Some(queue) = local.get_mut(&spot.queue) else {
            if !ended {
                tracing::warn!(instance = %id, queue = %spot.queue, "an instance waits in a queue this engine does not declare; it runs once the queue is declared");
            }
            continue;
        };
        if let Some(rate) = runner.queues.rate_of(&spot.queue) {
            for at in took_slot_at {
                queue.started(at, rate);
            }
        }
        if spot.holds_slot(status) {
            queue.hold(&id, spot.key.clone());
        } else if status == Status::Queued && runner.is_registered(&summary.workflow) {
            queue.wait(waiting(&id, &spot));
        }
    }
    Ok(())
}

/// Hands out the free slots of every queue, on a store of one process;
/// says when the first queue's rate lets one more start, if a rate holds
/// any back.
async fn take_local(runner: &Arc<Runner>) -> Result<Option<u64>> {
    let journal = &runner.core.journal;
    let mut rate_opens_at: Option<u64> = None;
    for queue in runner.queues.queues.all() {
        let limits = queue.limits();
        // Holders that ended (or were removed) let go; one put back waits.
        let holders = match lock(&runner.queues.local).get(&queue.name) {
            Some(local) => local.holders(),
            None => continue,
        };
        for id in holders {
            let read = journal.read(&id, |s| (s.queue.clone(), s.status)).await;
            match read {
                Ok((Some(spot), status)) if spot.holds_slot(status) => {}
                // Put back (a restart): it waits again.
                Ok((Some(spot), Status::Queued)) if !spot.taken => {
                    if let Some(local) = lock(&runner.queues.local).get_mut(&queue.name) {
                        local.wait(waiting(&id, &spot));
                    }
                }
                _ => forget(runner, &queue.name, &id),
            }
        }
        loop {
            let now = journal.now_millis();
            let picked = match lock(&runner.queues.local).get_mut(&queue.name) {
                Some(local) => local.pick(limits, now, |_| true),
                None => Vec::new(),
            };
            if picked.is_empty() {
                break;
            }
            let mut refused = false;
            for id in picked {
                if take(runner, &id).await {
                    if let Some(rate) = limits.rate {
                        started(runner, &queue.name, rate);
                    }
                    runner.spawn_driver(&id);
                } else {
                    // Ended, paused or removed while it waited: its slot
                    // goes to the next.
                    forget(runner, &queue.name, &id);
                    refused = true;
                }
            }
            if !refused {
                break;
            }
        }
        if let Some(rate) = limits.rate
            && let Some(local) = lock(&runner.queues.local).get(&queue.name)
            && let Some(at) = local.opens_at(rate, journal.now_millis())
        {
            rate_opens_at = Some(rate_opens_at.map_or(at, |first| first.min(at)));
        }
    }
    Ok(rate_opens_at)
}

/// An instance of `queue` took its slot just now: a start its rate
/// counts. The time is read after its `Dequeued` record was written, so
/// the window kept here never ends before the journal's would.
fn started(runner: &Runner, queue: &str, rate: crate::queue::rate::Rate) {
    let now = runner.core.journal.now_millis();
    if let Some(local) = lock(&runner.queues.local).get_mut(queue) {
        local.started(now, rate);
    }
}

/// Records that instance `id` took its slot, if it still waits for one.
async fn take(runner: &Runner, id: &str) -> bool {
    let took = runner
        .core
        .journal
        .write(id, |s| {
            if s.waits_in_queue() && s.status == Status::Queued {
                Ok((Some(Change::Dequeued), true))
            } else {
                Ok((None, false))
            }
        })
        .await;
    match took {
        Ok(took) => took,
        Err(e) => {
            tracing::debug!(instance = %id, error = %e, "a queued instance could not take its slot");
            false
        }
    }
}

fn forget(runner: &Runner, queue: &str, id: &str) {
    if let Some(local) = lock(&runner.queues.local).get_mut(queue) {
        local.forget(id);
    }
}

/// Takes, for every queue, the queued instances that may run on this
/// worker now, on a store shared by workers; each is this worker's from
/// then on, and runs here. Says when the first queue's rate lets one
/// more start, if a rate lets none now.
async fn take_shared(runner: &Arc<Runner>) -> Result<Option<u64>> {
    let workflows = runner.workflow_names();
    if workflows.is_empty() {
        return Ok(None);
    }
    let mut rate_opens_at: Option<u64> = None;
    for queue in runner.queues.queues.all() {
        let taken = runner.core.journal.take_queued(queue, &workflows).await?;
        for id in &taken.ids {
            runner.spawn_driver(id);
        }
        if let Some(at) = taken.rate_opens_at {
            rate_opens_at = Some(rate_opens_at.map_or(at, |first| first.min(at)));
        }
    }
    Ok(rate_opens_at)
}
