//! A flush under way while writes go on. The lease renewal that makes
//! every earlier write durable commits synchronously on a connection of
//! its own, so the write connections apply what comes meanwhile instead of
//! waiting for the disk with it.
//!
//! It covers what each write connection had applied when it began. Once
//! it committed, each connection with writes it covers must have lived
//! through it, on the same connection: one that broke, or was made again
//! meanwhile (applying its writes again at some moment of its own), may
//! hold writes the commit does not cover. Then, or when the commit fails,
//! the flush is done again the slow way (`Server::flush`), with nothing
//! else under way.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;

use super::super::fault::PgFailure;
use super::super::lease;
use super::super::writers;
use super::{Server, renew};
use crate::error::{Error, Result};

/// The commit of a renewal.
type Commit = Pin<Box<dyn Future<Output = std::result::Result<(), PgFailure>> + Send>>;

pub(super) struct Flushing {
    commit: Commit,
    /// Per write connection: how many of its unflushed writes the flush
    /// covers, and which connection applied them.
    marks: Vec<(usize, u64)>,
    replies: Vec<SyncSender<Result<()>>>,
}

impl Flushing {
    /// Waits for its commit.
    pub(super) async fn committed(&mut self) -> std::result::Result<(), PgFailure> {
        (&mut self.commit).await
    }
}

impl Server {
    /// Begins a flush that answers `replies`; `None` if it was answered
    /// at once (a failure, or done the slow way).
    pub(super) async fn begin_flush(
        &mut self,
        replies: Vec<SyncSender<Result<()>>>,
    ) -> Option<Flushing> {
        if self.failed.is_some() || self.fenced {
            let flushed = self.flush().await;
            self.answer(replies, flushed);
            return None;
        }
        let conn = match &self.flush_conn {
            Some(conn) if !conn.client.is_closed() => conn.clone(),
            _ => match self.target.connect().await {
                Ok(conn) => {
                    let conn = Arc::new(conn);
                    self.flush_conn = Some(conn.clone());
                    conn
                }
                Err(failure) => {
                    tracing::debug!(error = %failure, "could not open the flush connection; flushing on the write connection");
                    let flushed = self.flush().await;
                    self.answer(replies, flushed);
                    return None;
                }
            },
        };
        let sql = lease::renew_sql(&self.target.schema, &self.worker, self.lease);
        let timeout = self.timeout;
        let commit = Box::pin(async move {
            match tokio::time::timeout(timeout, renew(conn, sql)).await {
                Ok(committed) => committed,
                Err(_) => Err(PgFailure::Connection(format!(
                    "a flush did not commit within the store timeout ({timeout:?})"
                ))),
            }
        });
        let marks = self
            .writers
            .iter()
            .map(|writer| (writer.unflushed.len(), writer.generation))
            .collect();
        Some(Flushing {
            commit,
            marks,
            replies,
        })
    }

    /// Ends `flushing`, whose commit answered `committed`.
    pub(super) async fn end_flush(
        &mut self,
        flushing: Flushing,
        committed: std::result::Result<(), PgFailure>,
    ) {
        let Flushing { marks, replies, .. } = flushing;
        match committed {
            Ok(()) => {
                let checks = self
                    .writers
                    .iter()
                    .zip(&marks)
                    .map(|(writer, &(covered, generation))| {
                        Box::pin(async move {
                            covered == 0
                                || (writer.generation == generation && writer.lived().await)
                        })
                            as Pin<Box<dyn Future<Output = bool> + Send + '_>>
                    })
                    .collect();
                let lived = writers::all(checks).await;
                if lived.iter().all(|lived| *lived) {
                    for (writer, (covered, _)) in self.writers.iter_mut().zip(marks) {
                        writer.unflushed.drain(..covered);
                    }
                    self.answer(replies, Ok(()));
                    return;
                }
                for ((writer, lived), (_, generation)) in
                    self.writers.iter_mut().zip(lived).zip(marks)
                {
                    if !lived && writer.generation == generation {
                        writer.conn = None;
                    }
                }
            }
            Err(PgFailure::Fenced) => {
                if !self.fenced {
                    self.note_fenced().await;
                }
                self.answer(replies, Err(lease::fenced(&self.target.schema)));
                return;
            }
            Err(failure) => {
                tracing::debug!(error = %failure, "a flush on the flush connection failed; flushing on the write connection");
                self.flush_conn = None;
            }
        }
        let flushed = self.flush().await;
        self.answer(replies, flushed);
    }

    /// Ends the flush under way, if any, and answers the flushes asked for
    /// meanwhile: nothing is under way after it.
    pub(super) async fn settle_flushes(
        &mut self,
        pending: &mut Option<Flushing>,
        waiting: &mut Vec<SyncSender<Result<()>>>,
    ) {
        if let Some(mut flushing) = pending.take() {
            let committed = flushing.committed().await;
            self.end_flush(flushing, committed).await;
        }
        if !waiting.is_empty() {
            let flushed = self.flush().await;
            self.answer(std::mem::take(waiting), flushed);
        }
    }

    /// Tells every waiter of a flush how it went: the first its error
    /// itself, any other one the same error again.
    fn answer(&self, replies: Vec<SyncSender<Result<()>>>, result: Result<()>) {
        let again = |e: &Error| match e {
            Error::Fenced { detail } => Error::Fenced {
                detail: detail.clone(),
            },
            other => Error::Store(other.to_string()),
        };
        let mut result = Some(result);
        for reply in replies {
            let answer = match result.take() {
                Some(first) => first,
                None => Ok(()),
            };
            // Kept for the next waiter, if any.
            let next = match &answer {
                Ok(()) => Ok(()),
                Err(e) => Err(again(e)),
            };
            let _ = reply.send(answer);
            result = Some(next);
        }
    }
}
