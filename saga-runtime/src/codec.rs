//! The one place that decides how bytes are laid out on disk.
//!
//! Two encodings, each pinned here and nowhere else:
//!
//! - The engine's own records (journal entries, index summaries) are
//!   bincode 2, standard configuration with variable-length integers, behind
//!   a format-version byte. bincode's fixint and varint encodings cannot
//!   read each other's bytes, so the golden-byte tests below catch any change
//!   before it reaches a user's store.
//! - User values (workflow inputs and outputs, step inputs and outputs,
//!   event payloads) are JSON: every serde shape round-trips (`skip_serializing_if`,
//!   `flatten`, untagged enums, `serde_json::Value`), types can gain
//!   `#[serde(default)]` fields under running instances, and tools can show
//!   payloads without the user's types. A [`Payload`] carries its encoding,
//!   so stores written by the first release, whose payloads are bincode,
//!   still read.
//! - A user value the engine's codec (`EngineBuilder::codec`) sealed is a
//!   [`Payload::Sealed`]: the codec's bytes of the pinned bincode of the
//!   plain payload, with the codec's key id. A record that holds one (or
//!   a [`Payload::Redacted`]) is written with [`SEALED_FORMAT_VERSION`],
//!   so the release before this one, which knows neither, takes it for a
//!   newer release's record ([`from_newer_release`]), never for damage.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The format version of the first release's records (five trees of
/// instance, slot, history, rollback and event records).
pub(crate) const LEGACY_FORMAT_VERSION: u8 = 1;

/// The first byte of every journal entry and index record this build
/// writes, but for those of [`SEALED_FORMAT_VERSION`].
pub(crate) const FORMAT_VERSION: u8 = 2;

/// The first byte of a record that holds a payload the release before
/// this one does not know ([`Payload::Sealed`], [`Payload::Redacted`]):
/// one version past [`FORMAT_VERSION`], which that release takes for a
/// newer release's record and leaves alone. The bytes after it are laid
/// out as in [`FORMAT_VERSION`].
pub(crate) const SEALED_FORMAT_VERSION: u8 = FORMAT_VERSION + 1;

/// On PostgreSQL, the bit of an instance's `needs` column that says it
/// holds records of [`SEALED_FORMAT_VERSION`]: set by the statement that
/// writes one (from the record's first byte), so that a worker of the
/// release before, which claims only instances whose `needs` is at most
/// its count of record kinds, never claims it. The low 16 bits keep
/// counting record kinds; a later release adds bits of its own.
#[cfg(feature = "postgres")]
pub(crate) const NEEDS_SEALED: i32 = 1 << 16;

/// How many record kinds a release must know to read the journal record
/// `bytes`: its kind's index plus one (0 for bytes that are not a journal
/// record of this layout). Read from the header alone (format version,
/// the entry's time, the kind), so a store can keep an instance's
/// `needs` without decoding the record.
#[cfg(feature = "postgres")]
pub(crate) fn kinds_needed(bytes: &[u8]) -> u32 {
    /// One bincode varint at the start of `bytes`, and its length.
    fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
        let (&first, rest) = bytes.split_first()?;
        let wide = |n: usize| -> Option<(u64, usize)> {
            let mut value = [0u8; 8];
            value[..n].copy_from_slice(rest.get(..n)?);
            Some((u64::from_le_bytes(value), 1 + n))
        };
        match first {
            0..=250 => Some((u64::from(first), 1)),
            251 => wide(2),
            252 => wide(4),
            253 => wide(8),
            _ => None,
        }
    }
    let Some((&version, rest)) = bytes.split_first() else {
        return 0;
    };
    if version != FORMAT_VERSION && version != SEALED_FORMAT_VERSION {
        return 0;
    }
    let Some((_, at)) = varint(rest) else {
        return 0;
    };
    match rest.get(at..).and_then(varint) {
        Some((kind, _)) => u32::try_from(kind).map_or(u32::MAX, |k| k.saturating_add(1)),
        None => 0,
    }
}

/// How many kinds of journal record this release reads (the variants of
/// `journal::Change`): a store shared by workers leaves instances that
/// need more to a worker of a newer release.
pub(crate) const RECORD_KINDS: u32 = 45;

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

/// A stored user value with its encoding. Append only: bincode stores a
/// variant by its index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Payload {
    /// Written by the first release.
    Bincode(Vec<u8>),
    /// Written by this one.
    Json(Vec<u8>),
    /// Sealed by the engine's codec (`crate::seal`): `bytes` are what the
    /// codec made of the pinned bincode of the plain payload, with the key
    /// id `key` it used. Only in records of [`SEALED_FORMAT_VERSION`].
    Sealed { key: String, bytes: Vec<u8> },
    /// A step's inputs as JSON (the array of them), of which those at the
    /// positions `hidden` (from 0) are shown as `<redacted>` by the
    /// inspection read model and `saga show`. Stored whole: a rollback gets
    /// them. Only in records of [`SEALED_FORMAT_VERSION`].
    Redacted { json: Vec<u8>, hidden: Vec<u32> },
}

impl Payload {
    /// Encodes a user value as JSON.
    /// Encodes a user value. A panic in its `Serialize` is an error like
    /// any other: the caller's call, step or workflow fails, not the engine.
    pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Payload, String> {
        crate::panic::catch(|| serde_json::to_vec(value))
            .map_err(|panic| format!("its Serialize panicked: {panic}"))?
            .map(Payload::Json)
            .map_err(|e| e.to_string())
    }

    /// The JSON of a tuple whose elements were each encoded with
    /// [`Payload::encode`]: the same bytes as encoding the tuple at once
    /// (`[a,b]`, `[a]`, and `null` for `()`), so it decodes as the tuple.
    /// A step's inputs are encoded one by one, so that each input's type
    /// gets its own compile error and the tuple's arity has no limit.
    pub(crate) fn tuple(elements: &[Payload]) -> Payload {
        if elements.is_empty() {
            return Payload::Json(b"null".to_vec());
        }
        let mut out = vec![b'['];
        for (i, element) in elements.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(element.plain_bytes());
        }
        out.push(b']');
        Payload::Json(out)
    }

    /// The bytes of the value as encoded before any codec: those of a
    /// sealed one are the codec's.
    fn plain_bytes(&self) -> &[u8] {
        match self {
            Payload::Json(bytes) | Payload::Bincode(bytes) => bytes,
            Payload::Redacted { json, .. } => json,
            Payload::Sealed { bytes, .. } => bytes,
        }
    }

    /// Decodes a user value; every byte must be used. A value still sealed
    /// (its key was not in the engine's codec when its record was read)
    /// does not decode: the message names the key.
    pub(crate) fn decode<T: DeserializeOwned>(&self) -> Result<T, String> {
        match self {
            Payload::Json(bytes) | Payload::Redacted { json: bytes, .. } => {
                serde_json::from_slice(bytes).map_err(|e| e.to_string())
            }
            Payload::Bincode(bytes) => decode_bincode(bytes),
            Payload::Sealed { key, .. } => Err(missing_key_detail(key)),
        }
    }

    /// The key of a value still sealed, `None` for a readable one.
    pub(crate) fn sealed_key(&self) -> Option<&str> {
        match self {
            Payload::Sealed { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Whether the release before this one cannot read a record that
    /// holds this payload (see [`SEALED_FORMAT_VERSION`]).
    pub(crate) fn needs_sealed_format(&self) -> bool {
        matches!(self, Payload::Sealed { .. } | Payload::Redacted { .. })
    }

    /// The size of the value before any codec, for the payload limit.
    pub(crate) fn len(&self) -> usize {
        self.plain_bytes().len()
    }
}

/// What [`Payload::decode`] says of a value still sealed.
pub(crate) fn missing_key_detail(key: &str) -> String {
    format!(
        "it is encrypted with key {key:?}, which the engine's codec does not hold; \
         open the engine with a codec that holds it (EngineBuilder::codec), and a Blocked instance resumes"
    )
}

/// Encodes a payload (not a record: no version byte) with the pinned
/// encoding, for a codec to seal.
pub(crate) fn encode_payload(payload: &Payload) -> Vec<u8> {
    // Plain data: encoding into a Vec cannot fail.
    bincode::serde::encode_to_vec(payload, config()).unwrap_or_default()
}

/// Decodes what [`encode_payload`] made; every byte must be used.
pub(crate) fn decode_payload(bytes: &[u8]) -> Result<Payload, String> {
    decode_bincode(bytes)
}

fn decode_bincode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
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

/// Encodes one of the engine's records: the format version, then the record.
pub(crate) fn encode_record<T: Serialize>(record: &T) -> Vec<u8> {
    encode_record_as(record, FORMAT_VERSION)
}

/// Encodes a record behind `version` ([`FORMAT_VERSION`] or
/// [`SEALED_FORMAT_VERSION`]: the same layout).
pub(crate) fn encode_record_as<T: Serialize>(record: &T, version: u8) -> Vec<u8> {
    let mut out = vec![version];
    // Records are plain data (strings, integers, byte vectors): encoding
    // them into a Vec cannot fail.
    if let Ok(body) = bincode::serde::encode_to_vec(record, config()) {
        out.extend_from_slice(&body);
    }
    out
}

/// Decodes one of the engine's records written by this build (of either
/// of its versions).
pub(crate) fn decode_record<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.first() {
        Some(&SEALED_FORMAT_VERSION) => decode_versioned(bytes, SEALED_FORMAT_VERSION),
        _ => decode_versioned(bytes, FORMAT_VERSION),
    }
}

/// Decodes a record written behind `version` by [`encode_record_as`] (a
/// layout of its own, as of the schedule states); every byte must be used.
pub(crate) fn decode_record_as<T: DeserializeOwned>(
    bytes: &[u8],
    version: u8,
) -> Result<T, String> {
    decode_versioned(bytes, version)
}

/// Decodes a record of the first release, for the upgrade on open.
pub(crate) fn decode_legacy_record<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    decode_versioned(bytes, LEGACY_FORMAT_VERSION)
}

/// Whether `bytes` is a record that a newer release of saga wrote, of a
/// kind this build does not know: a newer format version, or, in this
/// version, an enum variant past the `known` variants of the enum that
/// follows `leading` integers at the start of the record. Such a record is
/// not damaged, only not this release's to read (see `journal::change`).
///
/// Only a version or variant a few releases ahead counts
/// ([`NEWER_WINDOW`], [`NEWER_VERSIONS`]): a byte far past them is damage, and parks the
/// instance as damage does.
pub(crate) fn from_newer_release(bytes: &[u8], leading: usize, known: u32) -> bool {
    let Some((&version, mut body)) = bytes.split_first() else {
        return false;
    };
    if version > SEALED_FORMAT_VERSION {
        return u32::from(version - SEALED_FORMAT_VERSION) <= NEWER_VERSIONS;
    }
    if version < FORMAT_VERSION {
        return false;
    }
    for _ in 0..leading {
        match read_varint(body) {
            Some((_, rest)) => body = rest,
            None => return false,
        }
    }
    read_varint(body).is_some_and(|(variant, _)| {
        variant >= u64::from(known) && variant < u64::from(known + NEWER_WINDOW)
    })
}

/// How many record kinds later releases may add before one of them is
/// taken for damage by this one.
pub(crate) const NEWER_WINDOW: u32 = 64;

/// How many format versions ahead a record may be, likewise.
const NEWER_VERSIONS: u32 = 4;

/// One integer of the pinned varint encoding, and the bytes after it.
fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (&first, rest) = bytes.split_first()?;
    let wide = |n: usize| -> Option<(u64, &[u8])> {
        let (le, rest) = rest.split_at_checked(n)?;
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(le);
        Some((u64::from_le_bytes(buf), rest))
    };
    match first {
        0..=250 => Some((u64::from(first), rest)),
        251 => wide(2),
        252 => wide(4),
        253 => wide(8),
        _ => None,
    }
}

/// Decodes a record of this build that later releases may extend with
/// fields appended at its end (the index facts): the fields it knows are
/// read, and bytes after them left to the release that wrote them.
pub(crate) fn decode_record_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.split_first() {
        Some((&FORMAT_VERSION, body)) => bincode::serde::decode_from_slice::<T, _>(body, config())
            .map(|(value, _)| value)
            .map_err(|e| e.to_string()),
        Some((version, _)) => Err(format!(
            "record format version {version}, expected version {FORMAT_VERSION}"
        )),
        None => Err("empty record".into()),
    }
}

fn decode_versioned<T: DeserializeOwned>(bytes: &[u8], expected: u8) -> Result<T, String> {
    match bytes.split_first() {
        None => Err("empty record".into()),
        Some((&version, body)) if version == expected => decode_bincode(body),
        Some((version, _)) => Err(format!(
            "record format version {version}, expected version {expected}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            [2, 4, b't', b'-', b'4', b'2', 251, 44, 1, 2, 1, 2, 1, 1]
        );
        assert_eq!(decode_record::<Sample>(&bytes), Ok(sample()));
        let mut legacy = bytes.clone();
        legacy[0] = LEGACY_FORMAT_VERSION;
        assert_eq!(decode_legacy_record::<Sample>(&legacy), Ok(sample()));
    }

    #[test]
    fn golden_bytes_of_a_payload() {
        let payload = Payload::encode(&sample()).unwrap();
        assert_eq!(
            encode_record(&payload),
            [
                [2u8, 1, 49].as_slice(),
                br#"{"id":"t-42","amount":300,"tags":[1,2],"ok":true}"#
            ]
            .concat()
        );
        assert_eq!(payload.decode::<Sample>(), Ok(sample()));
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
        let huge = [2u8, 255, 255, 255, 255, 255, 255, 255, 255, 255];
        assert!(decode_record::<Sample>(&huge).is_err());
    }

    #[test]
    fn records_of_a_newer_release_are_told_from_damaged_ones() {
        #[derive(Serialize)]
        enum Kind {
            Old,
            #[allow(dead_code)]
            Newer(u64),
        }
        // An integer, then the enum: its second variant is past the one known.
        let old = encode_record(&(1000u64, Kind::Old));
        let newer = encode_record(&(1000u64, Kind::Newer(7)));
        assert!(!from_newer_release(&old, 1, 1));
        assert!(from_newer_release(&newer, 1, 1));
        assert!(!from_newer_release(&newer, 1, 2));
        // A wide leading integer is skipped whole.
        assert!(from_newer_release(
            &encode_record(&(u64::MAX, Kind::Newer(1))),
            1,
            1
        ));
        let mut later_format = old.clone();
        later_format[0] = SEALED_FORMAT_VERSION + 1;
        assert!(from_newer_release(&later_format, 1, 1));
        // A record of this build's sealed format is read, or is damage.
        let mut sealed_format = old.clone();
        sealed_format[0] = SEALED_FORMAT_VERSION;
        assert!(!from_newer_release(&sealed_format, 1, 1));
        assert!(!from_newer_release(&[], 1, 1));
        assert!(!from_newer_release(&[FORMAT_VERSION, 255], 1, 1));
        // Far past what a few releases add: damage, not a newer kind.
        assert!(!from_newer_release(&[FORMAT_VERSION, 250, 250], 1, 27));
        assert!(from_newer_release(&[FORMAT_VERSION, 250, 27 + 63], 1, 27));
        let mut garbled = old.clone();
        garbled[0] = 200;
        assert!(!from_newer_release(&garbled, 1, 1));
    }

    #[test]
    fn a_tuple_of_encoded_elements_is_the_encoded_tuple() {
        let (a, b) = (sample(), "x".to_owned());
        let parts = [Payload::encode(&a).unwrap(), Payload::encode(&b).unwrap()];
        assert_eq!(Payload::tuple(&parts), Payload::encode(&(&a, &b)).unwrap());
        assert_eq!(
            Payload::tuple(&parts[1..]),
            Payload::encode(&(&b,)).unwrap()
        );
        assert_eq!(Payload::tuple(&[]), Payload::encode(&()).unwrap());
        assert_eq!(
            Payload::tuple(&parts).decode::<(Sample, String)>(),
            Ok((a, b))
        );
        assert_eq!(Payload::tuple(&[]).decode::<()>(), Ok(()));
    }

    #[test]
    fn json_payloads_round_trip_shapes_bincode_cannot() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        #[serde(untagged)]
        enum Either {
            N(u64),
            S(String),
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Shape {
            #[serde(skip_serializing_if = "Option::is_none")]
            note: Option<String>,
            either: Either,
            value: serde_json::Value,
        }
        let shape = Shape {
            note: None,
            either: Either::S("x".into()),
            value: serde_json::json!({"a": [1, 2]}),
        };
        let payload = Payload::encode(&shape).unwrap();
        assert_eq!(payload.decode::<Shape>(), Ok(shape));
    }
}
