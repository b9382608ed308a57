//! The one place that decides how bytes are laid out on disk.
//!
//! bincode 2's fixint and varint encodings cannot read each other's bytes,
//! so the configuration is pinned here and nowhere else; golden-byte tests
//! below catch any change before it reaches a user's store.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The first byte of every stored record.
pub(crate) const FORMAT_VERSION: u8 = 1;

/// No decode may claim more memory than this, whatever its length prefixes
/// say, so corrupt bytes cannot exhaust memory.
pub(crate) const DECODE_LIMIT: usize = 64 * 1024 * 1024;

type Pinned = Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT>>;

const fn config() -> Pinned {
    bincode::config::standard()
        .with_little_endian()
        .with_variable_int_encoding()
        .with_limit::<DECODE_LIMIT>()
}

/// Encodes a user value (step output, workflow input, event payload).
pub(crate) fn encode_payload<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| e.to_string())
}

/// Decodes a user value; every byte must be used.
pub(crate) fn decode_payload<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, read) =
        bincode::serde::decode_from_slice::<T, _>(bytes, config()).map_err(|e| e.to_string())?;
    if read != bytes.len() {
        return Err(format!(
            "{} trailing bytes after the value",
            bytes.len() - read
        ));
    }
    Ok(value)
}

/// Encodes a stored record: the format version, then the record.
pub(crate) fn encode_record<T: Serialize>(record: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_VERSION];
    // Records are plain data (strings, integers, byte vectors): encoding
    // them into a Vec cannot fail.
    if let Ok(body) = encode_payload(record) {
        out.extend_from_slice(&body);
    }
    out
}

/// Decodes a stored record, checking its format version.
pub(crate) fn decode_record<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.split_first() {
        None => Err("empty record".into()),
        Some((&FORMAT_VERSION, body)) => decode_payload(body),
        Some((version, _)) => Err(format!(
            "record format version {version}, this build reads version {FORMAT_VERSION}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Sample {
        id: String,
        amount: u64,
        tags: Vec<u16>,
        ok: Option<bool>,
    }

    fn sample() -> Sample {
        Sample {
            id: "t-42".into(),
            amount: 300,
            tags: vec![1, 2],
            ok: Some(true),
        }
    }

    /// If this fails, stored data from earlier builds no longer reads:
    /// bump FORMAT_VERSION and write a migration instead of changing bytes.
    #[test]
    fn golden_bytes_of_the_pinned_encoding() {
        let bytes = encode_record(&sample());
        assert_eq!(
            bytes,
            [1, 4, b't', b'-', b'4', b'2', 251, 44, 1, 2, 1, 2, 1, 1]
        );
        assert_eq!(decode_record::<Sample>(&bytes), Ok(sample()));
    }

    #[test]
    fn rejects_other_versions_trailing_bytes_and_huge_lengths() {
        let mut bytes = encode_record(&sample());
        bytes[0] = 9;
        assert!(
            decode_record::<Sample>(&bytes)
                .expect_err("wrong version")
                .contains("version 9")
        );
        let mut bytes = encode_record(&sample());
        bytes.push(0);
        assert!(decode_record::<Sample>(&bytes).is_err());
        // A string claiming u64::MAX bytes must fail, not allocate.
        let huge = [1u8, 255, 255, 255, 255, 255, 255, 255, 255, 255];
        assert!(decode_record::<Sample>(&huge).is_err());
    }
}
