//! The embedded store: one sled directory, one tree per kind of record.
//!
//! Keys of per-instance trees are `<id>/<big-endian index>`; ids never
//! contain `/`, and `/` sorts before every id character, so a prefix scan
//! of `<id>/` sees exactly one instance's records, in order.

use std::io;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use sled::Transactional;

use super::{Batch, Op, Store};
use crate::codec::{decode_record, encode_record};
use crate::error::{Error, Result};
use crate::failpoint::{self, Call};
use crate::record::{HistoryRecord, InstanceRecord, PendingEvent, RollbackRecord, SlotRecord};

pub(crate) struct SledStore {
    db: sled::Db,
    instances: sled::Tree,
    slots: sled::Tree,
    history: sled::Tree,
    rollbacks: sled::Tree,
    events: sled::Tree,
}

impl SledStore {
    /// Opens (creating with mode 0700) the store in `path`.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        create_private_dir(path)
            .map_err(|e| Error::Store(format!("could not create {}: {e}", path.display())))?;
        let db = sled::Config::new()
            .path(path)
            .open()
            .map_err(|e| open_error(path, e))?;
        Self::with_db(db)
    }

    /// A store in a temporary directory, removed when dropped.
    pub(crate) fn temporary() -> Result<Self> {
        let db = sled::Config::new().temporary(true).open()?;
        Self::with_db(db)
    }

    fn with_db(db: sled::Db) -> Result<Self> {
        Ok(SledStore {
            instances: db.open_tree("instances")?,
            slots: db.open_tree("slots")?,
            history: db.open_tree("history")?,
            rollbacks: db.open_tree("rollbacks")?,
            events: db.open_tree("events")?,
            db,
        })
    }

    fn scan<T: DeserializeOwned, I: FromKey>(
        tree: &sled::Tree,
        id: &str,
        what: &str,
    ) -> Result<Vec<(I, T)>> {
        let prefix = instance_prefix(id);
        tree.scan_prefix(&prefix)
            .map(|entry| {
                let (key, value) = entry?;
                let index = I::from_key(&key[prefix.len()..]).ok_or_else(|| Error::Corrupt {
                    what: format!("{what} key of instance {id:?}"),
                    detail: format!("key suffix of {} bytes", key.len() - prefix.len()),
                })?;
                let record = decode_record(&value).map_err(|detail| Error::Corrupt {
                    what: format!("{what} #{index} of instance {id:?}"),
                    detail,
                })?;
                Ok((index, record))
            })
            .collect()
    }

    fn split(&self, batch: &Batch) -> [sled::Batch; 5] {
        let mut out: [sled::Batch; 5] = Default::default();
        let [instances, slots, history, rollbacks, events] = &mut out;
        for op in &batch.ops {
            match op {
                Op::PutInstance(id, r) => {
                    instances.insert(id.as_bytes(), encode_record(r.as_ref()))
                }
                Op::DeleteInstance(id) => instances.remove(id.as_bytes()),
                Op::PutSlot(id, i, r) => slots.insert(key(id, *i), encode_record(r)),
                Op::DeleteSlot(id, i) => slots.remove(key(id, *i)),
                Op::PutHistory(id, i, r) => history.insert(key(id, *i), encode_record(r)),
                Op::DeleteHistory(id, i) => history.remove(key(id, *i)),
                Op::PutRollback(id, i, r) => rollbacks.insert(key(id, *i), encode_record(r)),
                Op::DeleteRollback(id, i) => rollbacks.remove(key(id, *i)),
                Op::PutPendingEvent(id, i, r) => events.insert(key(id, *i), encode_record(r)),
                Op::DeletePendingEvent(id, i) => events.remove(key(id, *i)),
            }
        }
        out
    }

    /// Applies the batches in one sled transaction; `guard` runs first and
    /// may veto the write.
    fn transact(
        &self,
        batch: &Batch,
        guard: impl Fn(
            &sled::transaction::TransactionalTree,
        ) -> sled::transaction::ConflictableTransactionResult<bool, ()>,
    ) -> Result<bool> {
        let [b_instances, b_slots, b_history, b_rollbacks, b_events] = self.split(batch);
        let trees = (
            &self.instances,
            &self.slots,
            &self.history,
            &self.rollbacks,
            &self.events,
        );
        let n = failpoint::before(Call::Write)?;
        let result = trees.transaction(|(instances, slots, history, rollbacks, events)| {
            if !guard(instances)? {
                return Ok(false);
            }
            instances.apply_batch(&b_instances)?;
            slots.apply_batch(&b_slots)?;
            history.apply_batch(&b_history)?;
            rollbacks.apply_batch(&b_rollbacks)?;
            events.apply_batch(&b_events)?;
            Ok(true)
        });
        let written = match result {
            Ok(written) => written,
            Err(sled::transaction::TransactionError::Storage(e)) => return Err(e.into()),
            Err(sled::transaction::TransactionError::Abort(())) => false,
        };
        failpoint::after(Call::Write, n)?;
        Ok(written)
    }
}

impl Store for SledStore {
    fn instance(&self, id: &str) -> Result<Option<InstanceRecord>> {
        match self.instances.get(id.as_bytes())? {
            None => Ok(None),
            Some(bytes) => decode_record(&bytes)
                .map(Some)
                .map_err(|detail| Error::Corrupt {
                    what: format!("instance record {id:?}"),
                    detail,
                }),
        }
    }

    fn instance_ids(&self) -> Result<Vec<String>> {
        self.instances
            .iter()
            .keys()
            .map(|key| Ok(String::from_utf8_lossy(&key?).into_owned()))
            .collect()
    }

    fn slots(&self, id: &str) -> Result<Vec<(u32, SlotRecord)>> {
        Self::scan(&self.slots, id, "slot")
    }

    fn rollbacks(&self, id: &str) -> Result<Vec<(u32, RollbackRecord)>> {
        Self::scan(&self.rollbacks, id, "rollback record")
    }

    fn history(&self, id: &str) -> Result<Vec<(u64, HistoryRecord)>> {
        Self::scan(&self.history, id, "history event")
    }

    fn next_history_seq(&self, id: &str) -> Result<u64> {
        let prefix = instance_prefix(id);
        match self.history.scan_prefix(&prefix).keys().next_back() {
            None => Ok(0),
            Some(key) => {
                let key = key?;
                u64::from_key(&key[prefix.len()..])
                    .map(|last| last + 1)
                    .ok_or_else(|| Error::Corrupt {
                        what: format!("history key of instance {id:?}"),
                        detail: "not an 8-byte sequence number".into(),
                    })
            }
        }
    }

    fn pending_events(&self, id: &str) -> Result<Vec<(u64, PendingEvent)>> {
        Self::scan(&self.events, id, "pending event")
    }

    fn create_instance(&self, id: &str, record: &InstanceRecord, mut batch: Batch) -> Result<bool> {
        batch.push(Op::PutInstance(id.to_owned(), Box::new(record.clone())));
        let key = id.as_bytes().to_vec();
        self.transact(&batch, |instances| Ok(instances.get(&key)?.is_none()))
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.transact(&batch, |_| Ok(true)).map(|_| ())
    }

    fn unique_id(&self) -> Result<u64> {
        Ok(self.db.generate_id()?)
    }

    fn flush(&self) -> Result<()> {
        let n = failpoint::before(Call::Flush)?;
        self.db.flush()?;
        failpoint::after(Call::Flush, n)
    }
}

fn instance_prefix(id: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(id.len() + 1);
    prefix.extend_from_slice(id.as_bytes());
    prefix.push(b'/');
    prefix
}

fn key<I: ToKey>(id: &str, index: I) -> Vec<u8> {
    let mut key = instance_prefix(id);
    index.append_to(&mut key);
    key
}

trait ToKey {
    fn append_to(self, key: &mut Vec<u8>);
}

impl ToKey for u32 {
    fn append_to(self, key: &mut Vec<u8>) {
        key.extend_from_slice(&self.to_be_bytes());
    }
}

impl ToKey for u64 {
    fn append_to(self, key: &mut Vec<u8>) {
        key.extend_from_slice(&self.to_be_bytes());
    }
}

trait FromKey: Sized + std::fmt::Display {
    fn from_key(bytes: &[u8]) -> Option<Self>;
}

impl FromKey for u32 {
    fn from_key(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(u32::from_be_bytes)
    }
}

impl FromKey for u64 {
    fn from_key(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(u64::from_be_bytes)
    }
}

/// Waits (at most `within`) until no one holds the lock of the store in
/// `path`: sled's IO threads may hold it a moment after the last handle of
/// the store is dropped, and a reopen right after `close` must not see
/// `StoreLocked` for that.
pub(crate) async fn wait_until_released(path: &Path, within: std::time::Duration) {
    let deadline = std::time::Instant::now() + within;
    // sled locks the file `db` in its directory.
    let Ok(file) = std::fs::File::open(path.join("db")) else {
        return;
    };
    while std::time::Instant::now() < deadline {
        match file.try_lock() {
            Ok(()) => {
                // Dropping `file` releases the probe's own lock.
                let _ = file.unlock();
                return;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            Err(std::fs::TryLockError::Error(_)) => return,
        }
    }
}

fn create_private_dir(path: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)
}

fn open_error(path: &Path, error: sled::Error) -> Error {
    match &error {
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            Error::StoreLocked {
                path: PathBuf::from(path),
            }
        }
        sled::Error::Corruption { at, .. } => Error::Corrupt {
            what: format!("the sled store at {}", path.display()),
            detail: format!(
                "sled found damaged data at {at:?} and will not open it; restore the directory from a backup"
            ),
        },
        _ => error.into(),
    }
}
