//! Sealing user values at rest: the engine's [`Codec`] encodes every user
//! value (workflow inputs and outputs, step inputs and outputs, event
//! payloads, typed failures, events posted to another worker's inbox) when
//! its record is written, and decodes it when the record is read. The
//! engine's own records (statuses, slots, times, names, error messages)
//! stay as they are: the store can still be listed, claimed and repaired
//! without the keys.
//!
//! Where it happens, and why there:
//!
//! - **Writing** a record ([`Sealer::encode_record`]) seals each of its
//!   payloads. The engine holds the plain record in memory; only the bytes
//!   handed to the store are sealed. So the payload limit applies to the
//!   value before encoding, and the codec runs once per value.
//! - **Reading** a record ([`Sealer::decode_record`]) opens each sealed
//!   payload. One whose key the codec does not hold (or an engine with no
//!   codec) stays sealed in memory: nothing fails until the value is used.
//!   Its first use is a typed error ([`Error::MissingKey`]) or, on replay,
//!   a `Decode` failure that parks the instance `Blocked`; opening the
//!   engine again with the key resumes it (a `Blocked` instance runs
//!   forward again on open). Bytes the codec refuses for another reason
//!   (altered, truncated) are damage, as any undecodable record is.
//! - **Old releases.** A record that holds a sealed payload is written with
//!   the next format version (`codec::SEALED_FORMAT_VERSION`), which the
//!   release before this one takes for a newer release's record: it
//!   answers `Error::NewerRelease` and leaves the instance alone, and on
//!   PostgreSQL the instance's `needs` column keeps its workers from
//!   claiming it (`codec::NEEDS_SEALED`).

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{self, Payload};
use crate::error::Error;

/// Encodes and decodes the user values an engine stores, like Temporal's
/// `PayloadCodec`: encryption, most often (see `Keyring`, feature
/// `encryption`), or compression.
///
/// `encode` gets the bytes of one value as the engine would store them and
/// returns the bytes to store instead, with the id of the key it used;
/// `decode` gets them back, with that id, and must return the same bytes.
/// Both run on the engine's threads, once per value written or read: keep
/// them fast and never blocking.
///
/// # Examples
///
/// ```
/// use saga_runtime::{Codec, CodecError, Sealed};
///
/// /// Reverses the bytes: a codec that hides nothing, for the shape.
/// struct Reverse;
///
/// impl Codec for Reverse {
///     fn encode(&self, plain: &[u8]) -> Result<Sealed, CodecError> {
///         Ok(Sealed { key: "reverse".into(), bytes: plain.iter().rev().copied().collect() })
///     }
///     fn decode(&self, sealed: &Sealed) -> Result<Vec<u8>, CodecError> {
///         match sealed.key.as_str() {
///             "reverse" => Ok(sealed.bytes.iter().rev().copied().collect()),
///             other => Err(CodecError::MissingKey { key: other.to_owned() }),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> saga_runtime::Result<()> {
/// let engine = saga_runtime::Engine::builder().codec(Reverse).temporary()?;
/// # drop(engine);
/// # Ok(())
/// # }
/// ```
pub trait Codec: Send + Sync + 'static {
    /// Seals one value's bytes.
    ///
    /// # Errors
    ///
    /// [`CodecError`]: the write of the record that holds the value fails,
    /// and nothing of it is stored.
    fn encode(&self, plain: &[u8]) -> Result<Sealed, CodecError>;

    /// Opens what [`Codec::encode`] sealed, maybe with a key it no longer
    /// seals new values with.
    ///
    /// # Errors
    ///
    /// [`CodecError::MissingKey`] when the codec does not hold `sealed.key`:
    /// the value stays sealed until an engine with the key reads it.
    /// [`CodecError::Invalid`] when the bytes do not open with it (altered,
    /// truncated): the record is taken for damage.
    fn decode(&self, sealed: &Sealed) -> Result<Vec<u8>, CodecError>;
}

/// A value as a [`Codec`] sealed it: the id of the key it used, and its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// The key's id, stored beside the bytes so keys can rotate: `saga
    /// show` prints it for a value it cannot open.
    pub key: String,
    /// The sealed bytes.
    pub bytes: Vec<u8>,
}

/// Why a [`Codec`] could not seal or open a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The codec does not hold the key the value was sealed with. Give the
    /// engine a codec that does (an older key stays in the keyring after a
    /// rotation).
    #[error("the codec holds no key {key:?}; add it to the codec (keyring) the engine is given")]
    MissingKey {
        /// The key's id.
        key: String,
    },
    /// The bytes do not open, or the value could not be sealed.
    #[error("{0}")]
    Invalid(String),
}

/// The typed error for the first use of a value still sealed with `key`.
pub(crate) fn missing_key(what: String, key: &str) -> Error {
    Error::MissingKey {
        what,
        key: key.to_owned(),
    }
}

/// A record that holds user values: the journal's entries and the posted
/// intents.
pub(crate) trait CarriesPayloads: Serialize + DeserializeOwned + Clone {
    /// Every payload of the record.
    fn payloads_mut(&mut self) -> Vec<&mut Payload>;
}

/// The engine's codec, if it has one, as the journal uses it.
#[derive(Clone, Default)]
pub(crate) struct Sealer {
    codec: Option<Arc<dyn Codec>>,
}

impl Sealer {
    pub(crate) fn new(codec: Arc<dyn Codec>) -> Sealer {
        Sealer { codec: Some(codec) }
    }

    /// Whether the engine has a codec (its payloads are sealed).
    pub(crate) fn seals(&self) -> bool {
        self.codec.is_some()
    }

    /// The bytes of `record` for the store: its payloads sealed, behind the
    /// version that says whether it holds one the release before cannot read.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`] when the codec refuses a value.
    pub(crate) fn encode_record<T: CarriesPayloads>(&self, record: &T) -> Result<Vec<u8>, Error> {
        let mut sealed = record.clone();
        let mut payloads = sealed.payloads_mut();
        if let Some(codec) = &self.codec {
            for payload in payloads.iter_mut() {
                seal(codec.as_ref(), payload)?;
            }
        }
        let version = if payloads.iter().any(|p| p.needs_sealed_format()) {
            codec::SEALED_FORMAT_VERSION
        } else {
            codec::FORMAT_VERSION
        };
        Ok(codec::encode_record_as(&sealed, version))
    }

    /// Reads a record the store holds, opening the payloads the codec holds
    /// keys for; the others stay sealed until their first use.
    pub(crate) fn decode_record<T: CarriesPayloads>(&self, bytes: &[u8]) -> Result<T, String> {
        let mut record: T = codec::decode_record(bytes)?;
        for payload in record.payloads_mut() {
            self.open(payload)?;
        }
        Ok(record)
    }

    /// Opens `payload` in place when it is sealed with a key the codec holds.
    fn open(&self, payload: &mut Payload) -> Result<(), String> {
        let (Some(codec), Payload::Sealed { key, bytes }) = (&self.codec, &*payload) else {
            return Ok(());
        };
        let sealed = Sealed {
            key: key.clone(),
            bytes: bytes.clone(),
        };
        let plain = match crate::panic::catch(|| codec.decode(&sealed)) {
            Ok(Ok(plain)) => plain,
            Ok(Err(CodecError::MissingKey { .. })) => return Ok(()),
            Ok(Err(CodecError::Invalid(detail))) => {
                return Err(format!(
                    "a value sealed with key {key:?} does not open: {detail}"
                ));
            }
            Err(panic) => return Err(format!("the codec panicked opening a value: {panic}")),
        };
        match codec::decode_payload(&plain) {
            Ok(Payload::Sealed { .. }) => Err(format!(
                "a value sealed with key {key:?} holds another sealed value"
            )),
            Ok(opened) => {
                *payload = opened;
                Ok(())
            }
            Err(detail) => Err(format!(
                "a value sealed with key {key:?} opens to bytes that are no payload: {detail}"
            )),
        }
    }
}

/// Seals one payload in place; a legacy bincode payload (written in the
/// clear by the first release) and one still sealed stay as they are.
fn seal(codec: &dyn Codec, payload: &mut Payload) -> Result<(), Error> {
    if matches!(payload, Payload::Bincode(_) | Payload::Sealed { .. }) {
        return Ok(());
    }
    let plain = codec::encode_payload(payload);
    let sealed = match crate::panic::catch(|| codec.encode(&plain)) {
        Ok(result) => result.map_err(|e| Error::Codec {
            detail: e.to_string(),
        })?,
        Err(panic) => {
            return Err(Error::Codec {
                detail: format!("the codec panicked: {panic}"),
            });
        }
    };
    *payload = Payload::Sealed {
        key: sealed.key,
        bytes: sealed.bytes,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_record, encode_record_as};

    struct Xor(u8, &'static str);

    impl Codec for Xor {
        fn encode(&self, plain: &[u8]) -> Result<Sealed, CodecError> {
            Ok(Sealed {
                key: self.1.into(),
                bytes: plain.iter().map(|b| b ^ self.0).collect(),
            })
        }
        fn decode(&self, sealed: &Sealed) -> Result<Vec<u8>, CodecError> {
            if sealed.key != self.1 {
                return Err(CodecError::MissingKey {
                    key: sealed.key.clone(),
                });
            }
            Ok(sealed.bytes.iter().map(|b| b ^ self.0).collect())
        }
    }

    #[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Record(u64, Payload);

    impl CarriesPayloads for Record {
        fn payloads_mut(&mut self) -> Vec<&mut Payload> {
            vec![&mut self.1]
        }
    }

    fn record() -> Record {
        Record(7, Payload::Json(b"42".to_vec()))
    }

    /// If this fails, sealed records written by earlier builds no longer
    /// read: add a format version instead of changing bytes.
    #[test]
    fn golden_bytes_of_a_sealed_record() {
        let sealer = Sealer::new(Arc::new(Xor(0xff, "k1")));
        let bytes = sealer.encode_record(&record()).unwrap();
        // Version 3, the 7, variant 2 (`Sealed`), the key, then the codec's
        // bytes of the payload's bincode (variant 1, 2 bytes, "42").
        assert_eq!(bytes, [3, 7, 2, 2, b'k', b'1', 4, !1u8, !2u8, !b'4', !b'2']);
        assert_eq!(sealer.decode_record::<Record>(&bytes), Ok(record()));
        // Without the key, the value stays sealed until it is used.
        let other = Sealer::new(Arc::new(Xor(0x0f, "k2")));
        let still: Record = other.decode_record(&bytes).unwrap();
        assert_eq!(still.1.sealed_key(), Some("k1"));
        assert!(still.1.decode::<u64>().unwrap_err().contains("\"k1\""));
        let none: Record = Sealer::default().decode_record(&bytes).unwrap();
        assert_eq!(none.1.sealed_key(), Some("k1"));
    }

    #[test]
    fn golden_bytes_of_a_redacted_payload() {
        let redacted = Record(
            7,
            Payload::Redacted {
                json: b"[1]".to_vec(),
                hidden: vec![0],
            },
        );
        let bytes = Sealer::default().encode_record(&redacted).unwrap();
        assert_eq!(bytes, [3, 7, 3, 3, b'[', b'1', b']', 1, 0]);
        assert_eq!(decode_record::<Record>(&bytes), Ok(redacted.clone()));
        assert_eq!(redacted.1.decode::<[u8; 1]>(), Ok([1]));
    }

    #[test]
    fn a_record_without_a_codec_keeps_the_format_of_the_release_before() {
        let bytes = Sealer::default().encode_record(&record()).unwrap();
        assert_eq!(bytes, [2, 7, 1, 2, b'4', b'2']);
    }

    #[test]
    fn altered_sealed_bytes_are_damage_not_a_missing_key() {
        let sealer = Sealer::new(Arc::new(Xor(0xff, "k1")));
        let mut bytes = sealer.encode_record(&record()).unwrap();
        bytes[7] ^= 0x55; // the inner payload's variant
        let error = sealer.decode_record::<Record>(&bytes).unwrap_err();
        assert!(error.contains("no payload"), "{error}");
        // The same layout behind either version.
        let mut before = encode_record_as(&record(), codec::SEALED_FORMAT_VERSION);
        before[0] = codec::FORMAT_VERSION;
        assert_eq!(decode_record::<Record>(&before), Ok(record()));
    }
}
