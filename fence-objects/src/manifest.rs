//! The manifest: a fenced pointer to plain objects, for readers that must see plain bytes.
//!
//! ```text
//! FENCE-MANIFEST/1
//! lake/sales/2026/part-0.csv
//! lake/sales/2026/part-1.csv
//! ```
//!
//! One object key per line after the format line, each line ending in `\n`, in the order the
//! writer gave. It is the payload of a domain's fenced object, so it starts after the envelope
//! (FORMATS.md); the keys it names are plain objects with no envelope at all.

use bytes::Bytes;
use fence_core::InvalidInput;

const MAGIC: &str = "FENCE-MANIFEST/1\n";
/// The most keys one manifest lists.
pub const MAX_MANIFEST_KEYS: usize = 10_000;

/// The list of plain object keys a fenced pointer names, in order.
///
/// ```
/// use fence_objects::Manifest;
/// let manifest = Manifest::new(["lake/q3/part-0.csv", "lake/q3/part-1.csv"])?;
/// let bytes = manifest.encode();
/// assert!(bytes.starts_with(b"FENCE-MANIFEST/1\nlake/q3/part-0.csv\n"));
/// assert_eq!(Manifest::parse(&bytes)?, manifest);
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    keys: Vec<String>,
}

impl Manifest {
    /// A manifest of these keys: each non-empty, without control characters, at most 1,024
    /// bytes; at most [`MAX_MANIFEST_KEYS`] of them.
    pub fn new<K: Into<String>>(keys: impl IntoIterator<Item = K>) -> Result<Self, InvalidInput> {
        let keys: Vec<String> = keys.into_iter().map(Into::into).collect();
        match problem(&keys) {
            Some(why) => Err(InvalidInput::Configuration(why)),
            None => Ok(Manifest { keys }),
        }
    }

    /// The keys, in the writer's order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The payload to write as the domain's value.
    pub fn encode(&self) -> Bytes {
        let mut text = String::from(MAGIC);
        for key in &self.keys {
            text.push_str(key);
            text.push('\n');
        }
        Bytes::from(text)
    }

    /// Parses a manifest payload; anything else is refused, naming what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, InvalidInput> {
        let bad = |why: &str| InvalidInput::Configuration(format!("not a manifest: {why}"));
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let body = text
            .strip_prefix(MAGIC)
            .ok_or_else(|| bad("no `FENCE-MANIFEST/1` line"))?;
        if !(body.is_empty() || body.ends_with('\n')) {
            return Err(bad("the last key has no line end"));
        }
        let keys: Vec<String> = body.split_terminator('\n').map(str::to_owned).collect();
        match problem(&keys) {
            Some(why) => Err(bad(&why)),
            None => Ok(Manifest { keys }),
        }
    }
}

fn problem(keys: &[String]) -> Option<String> {
    if keys.len() > MAX_MANIFEST_KEYS {
        return Some(format!(
            "a manifest lists at most {MAX_MANIFEST_KEYS} keys, not {}",
            keys.len()
        ));
    }
    keys.iter()
        .find(|k| k.is_empty() || k.len() > 1024 || k.chars().any(char::is_control))
        .map(|bad| {
            format!(
                "manifest key `{}` must be 1 to 1024 bytes without control characters",
                bad.chars().take(120).collect::<String>().escape_debug()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_other_payloads() {
        let empty = Manifest::new(Vec::<String>::new()).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(&empty.encode()[..], MAGIC.as_bytes());
        assert_eq!(Manifest::parse(MAGIC.as_bytes()), Ok(empty));
        for bad in [
            &b"a,b\n1,2\n"[..],
            b"FENCE-MANIFEST/1\nkey",
            b"FENCE-MANIFEST/1\n\n",
            b"FENCE-MANIFEST/2\nkey\n",
            b"FENCE-MANIFEST/1\n\xff\n",
        ] {
            assert!(Manifest::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Manifest::new(["a\rb"]).is_err());
        assert!(Manifest::new(vec!["k"; MAX_MANIFEST_KEYS + 1]).is_err());
    }
}
