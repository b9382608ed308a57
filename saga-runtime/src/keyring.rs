//! A ready [`Codec`] that encrypts: XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`), with key ids so keys rotate.
//!
//! Each value gets a fresh random 24-byte nonce from the operating system
//! (192 bits: random nonces never repeat in practice, however many values
//! one key seals, unlike AES-GCM's 96). The stored bytes are the nonce,
//! then the ciphertext and its 16-byte tag; the key id is authenticated
//! with them (associated data), so a value cannot be passed off as sealed
//! by another key.

use std::path::Path;

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload as Aad};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::error::{Error, Result};
use crate::seal::{Codec, CodecError, Sealed};

/// The size of a key: 256 bits.
pub const KEY_BYTES: usize = 32;

const NONCE_BYTES: usize = 24;

/// Keys by id: new values are sealed with the current key, and values
/// sealed with any key of the ring open.
///
/// # Examples
///
/// ```
/// use saga_runtime::{Engine, Keyring};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> saga_runtime::Result<()> {
/// let keys = Keyring::new("2026-12", [7u8; 32])? // new values: key "2026-12"
///     .with_old_key("2026-06", [1u8; 32])?;     // still opens values sealed before
/// let engine = Engine::builder().codec(keys).temporary()?;
/// # drop(engine);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Keyring {
    current: String,
    keys: Vec<(String, XChaCha20Poly1305)>,
}

impl std::fmt::Debug for Keyring {
    // Never the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Keyring")
            .field("current", &self.current)
            .field("keys", &ids)
            .finish()
    }
}

impl Keyring {
    /// A ring whose current key is `key`, of id `id` (1-64 characters of
    /// `[A-Za-z0-9_.-]`; stored beside each value, so never a secret).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an id outside that grammar.
    pub fn new(id: &str, key: [u8; KEY_BYTES]) -> Result<Keyring> {
        check_id(id)?;
        Ok(Keyring {
            current: id.to_owned(),
            keys: vec![(id.to_owned(), cipher(&key))],
        })
    }

    /// Adds a key that opens values sealed before a rotation, and seals none.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad id, or one the ring holds.
    pub fn with_old_key(mut self, id: &str, key: [u8; KEY_BYTES]) -> Result<Keyring> {
        check_id(id)?;
        if self.keys.iter().any(|(known, _)| known == id) {
            return Err(Error::InvalidArgument(format!(
                "key id {id:?} is in the keyring twice; give each key an id of its own"
            )));
        }
        self.keys.push((id.to_owned(), cipher(&key)));
        Ok(self)
    }

    /// A ring from a key file: one key a line, `<id> <64 hex digits>`; the
    /// first is the current key, the others open older values. Blank lines
    /// and lines that start with `#` are skipped.
    ///
    /// ```text
    /// # saga keys: the first seals new values
    /// 2026-12 8f3a...(64 hex digits)
    /// 2026-06 01be...(64 hex digits)
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the file and line of a bad one,
    /// or for a file without keys or that does not read.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Keyring> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::InvalidArgument(format!("key file {}: {e}", path.display())))?;
        Keyring::parse(&text).map_err(|detail| {
            Error::InvalidArgument(format!("key file {}: {detail}", path.display()))
        })
    }

    /// [`Keyring::from_file`] of the file's text.
    fn parse(text: &str) -> std::result::Result<Keyring, String> {
        let mut ring: Option<Keyring> = None;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |detail: String| format!("line {}: {detail}", n + 1);
            let (id, hex) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| at("expected `<key id> <64 hex digits>`".into()))?;
            let key = parse_hex(hex.trim()).map_err(at)?;
            ring = Some(
                match ring {
                    None => Keyring::new(id, key),
                    Some(ring) => ring.with_old_key(id, key),
                }
                .map_err(|e| at(e.to_string()))?,
            );
        }
        ring.ok_or_else(|| "holds no key; write `<key id> <64 hex digits>` lines".to_owned())
    }

    /// The id of the key new values are sealed with.
    pub fn current_key(&self) -> &str {
        &self.current
    }
}

impl Codec for Keyring {
    fn encode(&self, plain: &[u8]) -> std::result::Result<Sealed, CodecError> {
        let Some((id, cipher)) = self.keys.first() else {
            return Err(CodecError::Invalid("the keyring holds no key".into()));
        };
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = cipher
            .encrypt(
                &nonce,
                Aad {
                    msg: plain,
                    aad: id.as_bytes(),
                },
            )
            .map_err(|_| CodecError::Invalid("encryption failed".into()))?;
        let mut bytes = Vec::with_capacity(NONCE_BYTES + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        Ok(Sealed {
            key: id.clone(),
            bytes,
        })
    }

    fn decode(&self, sealed: &Sealed) -> std::result::Result<Vec<u8>, CodecError> {
        let Some((_, cipher)) = self.keys.iter().find(|(id, _)| *id == sealed.key) else {
            return Err(CodecError::MissingKey {
                key: sealed.key.clone(),
            });
        };
        let Some((nonce, body)) = sealed.bytes.split_at_checked(NONCE_BYTES) else {
            return Err(CodecError::Invalid("shorter than its nonce".into()));
        };
        cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Aad {
                    msg: body,
                    aad: sealed.key.as_bytes(),
                },
            )
            .map_err(|_| {
                CodecError::Invalid(format!(
                    "it does not authenticate with key {:?}: altered, or sealed with another key of that id",
                    sealed.key
                ))
            })
    }
}

fn cipher(key: &[u8; KEY_BYTES]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(key.into())
}

fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "key id {id:?}: use 1-64 characters of [A-Za-z0-9_.-]"
        )))
    }
}

fn parse_hex(hex: &str) -> std::result::Result<[u8; KEY_BYTES], String> {
    let digits: Vec<u8> = hex
        .chars()
        .map(|c| c.to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()
        .ok_or_else(|| "the key is not hex digits".to_owned())?;
    if digits.len() != 2 * KEY_BYTES {
        return Err(format!(
            "the key is {} hex digits; a key is {} (256 bits)",
            digits.len(),
            2 * KEY_BYTES
        ));
    }
    let mut key = [0u8; KEY_BYTES];
    for (byte, pair) in key.iter_mut().zip(digits.chunks(2)) {
        *byte = pair[0] << 4 | pair[1];
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_rotate() {
        let old = Keyring::new("k1", [1; 32]).unwrap();
        let sealed = old.encode(b"card 4242").unwrap();
        assert_eq!(sealed.key, "k1");
        assert_eq!(sealed.bytes.len(), 24 + 9 + 16);
        assert!(!sealed.bytes.windows(4).any(|w| w == b"4242"));
        assert_eq!(old.decode(&sealed).unwrap(), b"card 4242");
        // Nonces differ: the same value seals to other bytes.
        assert_ne!(old.encode(b"card 4242").unwrap().bytes, sealed.bytes);
        let rotated = Keyring::new("k2", [2; 32])
            .unwrap()
            .with_old_key("k1", [1; 32])
            .unwrap();
        assert_eq!(rotated.encode(b"x").unwrap().key, "k2");
        assert_eq!(rotated.decode(&sealed).unwrap(), b"card 4242");
        let without = Keyring::new("k2", [2; 32]).unwrap();
        assert!(matches!(
            without.decode(&sealed),
            Err(CodecError::MissingKey { key }) if key == "k1"
        ));
    }

    #[test]
    fn altered_bytes_and_swapped_key_ids_do_not_open() {
        let ring = Keyring::new("k1", [1; 32])
            .unwrap()
            .with_old_key("k0", [1; 32])
            .unwrap();
        let mut sealed = ring.encode(b"value").unwrap();
        sealed.bytes[30] ^= 1;
        assert!(matches!(ring.decode(&sealed), Err(CodecError::Invalid(_))));
        let mut swapped = ring.encode(b"value").unwrap();
        swapped.key = "k0".into();
        assert!(matches!(ring.decode(&swapped), Err(CodecError::Invalid(_))));
    }

    #[test]
    fn key_files_name_the_line_of_a_bad_key() {
        let good = format!("# keys\n\nk2 {}\nk1 {}\n", "ab".repeat(32), "01".repeat(32));
        let ring = Keyring::parse(&good).unwrap();
        assert_eq!(ring.current_key(), "k2");
        assert_eq!(ring.keys.len(), 2);
        assert!(Keyring::parse("k1 abc").unwrap_err().contains("line 1"));
        assert!(Keyring::parse("# none\n").unwrap_err().contains("no key"));
        let twice = format!("k1 {0}\nk1 {0}\n", "ab".repeat(32));
        assert!(Keyring::parse(&twice).unwrap_err().contains("line 2"));
        assert!(Keyring::parse(&format!("bad/id {}", "ab".repeat(32))).is_err());
    }
}
