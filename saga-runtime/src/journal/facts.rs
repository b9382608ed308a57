//! The facts of an instance that `list()` filters on beyond its summary:
//! tags, parent, whether a compensation failed. A structure of its own
//! beside the index `Summary` (which never gains fields: the release
//! before reads its bytes), kept by the store in its index.

use serde::{Deserialize, Serialize};

use super::queued::QueueSpot;
use super::state::InstanceState;

/// Encoded (with the format version) into each index entry's facts.
/// Append fields only at the end: a release before reads the prefix it
/// knows (`codec::decode_record_prefix`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Facts {
    /// By key.
    pub(crate) tags: Vec<(String, String)>,
    pub(crate) parent: Option<String>,
    pub(crate) failed_compensation: bool,
    /// It completed and was then undone by its parent's rollback: its
    /// summary says `Complete` (the status the release before knows), and
    /// this says `Compensated`.
    pub(crate) compensated: bool,
    /// Its place in a queue (`start_on`).
    pub(crate) queue: Option<QueueSpot>,
}

/// The facts as the release before wrote them, without the fields since.
#[derive(Deserialize)]
struct FactsOfChildren {
    tags: Vec<(String, String)>,
    parent: Option<String>,
    failed_compensation: bool,
    compensated: bool,
}

/// The facts as the release before that wrote them.
#[derive(Deserialize)]
struct FactsBefore {
    tags: Vec<(String, String)>,
    parent: Option<String>,
    failed_compensation: bool,
}

impl Facts {
    pub(crate) fn of(state: &InstanceState) -> Facts {
        Facts {
            tags: state
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            parent: state.parent.clone(),
            failed_compensation: state.failed_compensation,
            compensated: state.status == crate::model::status::Status::Compensated,
            queue: state.queue.clone(),
        }
    }

    /// Decodes index facts written by this release, by the releases
    /// before (without the fields added since), or by a newer one (fields
    /// appended, not read).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Facts, String> {
        use crate::codec::decode_record_prefix;
        decode_record_prefix::<Facts>(bytes).or_else(|newest| {
            decode_record_prefix::<FactsOfChildren>(bytes)
                .map(|before| Facts {
                    tags: before.tags,
                    parent: before.parent,
                    failed_compensation: before.failed_compensation,
                    compensated: before.compensated,
                    queue: None,
                })
                .or_else(|_| {
                    decode_record_prefix::<FactsBefore>(bytes).map(|before| Facts {
                        tags: before.tags,
                        parent: before.parent,
                        failed_compensation: before.failed_compensation,
                        compensated: false,
                        queue: None,
                    })
                })
                .map_err(|_| newest)
        })
    }

    /// The status of an entry whose summary says `status`.
    pub(crate) fn status(
        &self,
        status: crate::model::status::Status,
    ) -> crate::model::status::Status {
        use crate::model::status::Status;
        if self.compensated && status == Status::Complete {
            Status::Compensated
        } else {
            status
        }
    }

    /// Whether it has every tag of `wanted`.
    pub(crate) fn has_tags(&self, wanted: &[(String, String)]) -> bool {
        wanted
            .iter()
            .all(|(k, v)| self.tags.iter().any(|(key, value)| key == k && value == v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_record, encode_record};

    /// If this fails, index entries written by earlier builds no longer
    /// read.
    #[test]
    fn golden_bytes_of_index_facts() {
        let facts = Facts {
            tags: vec![("k".into(), "v".into())],
            parent: Some("p".into()),
            failed_compensation: true,
            compensated: true,
            queue: Some(QueueSpot {
                queue: "q".into(),
                key: None,
                priority: 2,
                order: 5,
                taken: true,
            }),
        };
        let bytes = encode_record(&facts);
        assert_eq!(
            bytes,
            [
                2, 1, 1, b'k', 1, b'v', 1, 1, b'p', 1, 1, 1, 1, b'q', 0, 4, 5, 1
            ]
        );
        assert_eq!(decode_record::<Facts>(&bytes), Ok(facts.clone()));
        // A newer release's facts, with a field appended, still read.
        let mut newer = bytes.clone();
        newer.extend_from_slice(&[1, 7]);
        assert_eq!(Facts::decode(&newer), Ok(facts.clone()));
        // The release before's, without `queue`, read as on none.
        let children = [2, 1, 1, b'k', 1, b'v', 1, 1, b'p', 1, 1];
        assert_eq!(
            Facts::decode(&children),
            Ok(Facts {
                queue: None,
                ..facts.clone()
            })
        );
        // The one before that, without `compensated`, read as not.
        let before = &children[..children.len() - 1];
        assert_eq!(
            Facts::decode(before),
            Ok(Facts {
                compensated: false,
                queue: None,
                ..facts
            })
        );
    }
}
