//! The facts of an instance that `list()` filters on beyond its summary:
//! tags, parent, whether a compensation failed. A structure of its own
//! beside the index `Summary` (which never gains fields: the release
//! before reads its bytes), kept by the store in its index.

use serde::{Deserialize, Serialize};

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
        };
        let bytes = encode_record(&facts);
        assert_eq!(bytes, [2, 1, 1, b'k', 1, b'v', 1, 1, b'p', 1]);
        assert_eq!(decode_record::<Facts>(&bytes), Ok(facts.clone()));
        // A newer release's facts, with a field appended, still read.
        let mut newer = bytes.clone();
        newer.extend_from_slice(&[1, 7]);
        assert_eq!(
            crate::codec::decode_record_prefix::<Facts>(&newer),
            Ok(facts)
        );
    }
}
