//! Upgrading a store of the first release (format version 1): its
//! records are read by `legacy`, and each instance becomes one `Imported`
//! journal record holding its folded state and its history.

pub(crate) mod legacy;

use super::change::{Change, Entry};
use super::{Indexed, Journal, corrupt, machine};
use crate::codec::encode_record;
use crate::error::Error;

impl Journal {
    /// Upgrades a store of the first release: each instance becomes one
    /// `Imported` record, then the old trees go.
    pub(crate) async fn import_legacy(
        &self,
        store: &crate::store::SledStore,
    ) -> crate::error::Result<usize> {
        let instances = store.legacy_instances()?;
        let mut imported = 0;
        for legacy in &instances {
            if self.store.last_seq(&legacy.id).await?.is_some() {
                continue;
            }
            let record = legacy::import(legacy).map_err(|detail| Error::Corrupt {
                what: format!("instance {:?} of a format-version-1 store", legacy.id),
                detail,
            })?;
            let entry = Entry {
                at: record.state.created_at,
                change: Change::Imported(Box::new(record)),
            };
            let mut state = None;
            machine::apply(&mut state, 0, &entry).map_err(|e| corrupt(&legacy.id, 0, e))?;
            let Some(state) = state else { continue };
            let indexed = Indexed::of(&state, 0);
            self.store
                .create(&legacy.id, &indexed.row(), &encode_record(&entry))
                .await?;
            imported += 1;
        }
        if !instances.is_empty() {
            self.store.flush()?;
            store.drop_legacy_trees()?;
            self.store.flush()?;
        }
        Ok(imported)
    }
}
