//! Waking other processes: LISTEN/NOTIFY on a channel named after the
//! schema (channels are database-wide).
//!
//! A post notifies `post:<owner>`, naming the worker that owns its
//! instance; an instance that stops needing a driver (it ended, or was
//! paused) notifies `stopped`. Every engine on the schema listens on a
//! connection of its own and counts what concerns it: the owner of a
//! posted instance takes its inbox at once, and `result()` and subscribers
//! of other workers' instances look at once, instead of at their next
//! poll. A notification is lost with a connection, so polling stays the
//! fallback: after a lost connection both counts move, so everyone looks
//! once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::AsyncMessage;

use super::fault::PgFailure;
use super::server::connect::{Target, channel};

/// The counts of what an engine heard, by kind.
pub(super) struct Heard<T> {
    pub(super) posts: T,
    pub(super) stops: T,
}

/// The channels of the counts: senders for the listener, receivers for
/// the store.
pub(super) fn channels() -> (Heard<watch::Sender<u64>>, Heard<watch::Receiver<u64>>) {
    let (posts, posts_heard) = watch::channel(0);
    let (stops, stops_heard) = watch::channel(0);
    (
        Heard { posts, stops },
        Heard {
            posts: posts_heard,
            stops: stops_heard,
        },
    )
}

/// Listens on the schema's channel for as long as the store's thread
/// runs, counting what concerns `worker` into `heard`.
pub(super) fn spawn(target: Arc<Target>, worker: Arc<str>, heard: Heard<watch::Sender<u64>>) {
    tokio::spawn(async move {
        let mine = format!("post:{worker}");
        let mut backoff = Duration::from_millis(50);
        loop {
            match listen(&target, &mine, &heard).await {
                Ok(()) => backoff = Duration::from_millis(50),
                // A refusal for good (a certificate that stopped
                // verifying): said louder, and tried again all the same,
                // as polling stands in meanwhile.
                Err(e @ PgFailure::Other(_)) => {
                    tracing::warn!(error = %e, "could not open the PostgreSQL notification connection")
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the PostgreSQL notification connection ended")
                }
            }
            if heard.posts.is_closed() && heard.stops.is_closed() {
                return;
            }
            // Whatever was told meanwhile was lost: look once.
            bump(&heard.posts);
            bump(&heard.stops);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    });
}

fn bump(count: &watch::Sender<u64>) {
    count.send_modify(|n| *n += 1);
}

/// One connection's worth of listening: ends when the connection does.
async fn listen(
    target: &Target,
    mine: &str,
    heard: &Heard<watch::Sender<u64>>,
) -> Result<(), PgFailure> {
    let (client, mut connection) = target.open().await?;
    let (told, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    // The connection is driven here, so its notifications come out.
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if told.send(n.payload().to_owned()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "the PostgreSQL notification connection broke");
                    return;
                }
            }
        }
    });
    let listening = client
        .batch_execute(&format!("LISTEN \"{}\"", channel(&target.schema)))
        .await;
    if let Err(e) = listening {
        driver.abort();
        return Err(e.into());
    }
    while let Some(payload) = notifications.recv().await {
        if payload == "stopped" {
            bump(&heard.stops);
        } else if payload == mine {
            bump(&heard.posts);
        }
    }
    driver.abort();
    Ok(())
}
