//! The ownership domain: the scope a lease covers and a high-water mark belongs to.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::InvalidInput;

/// The greatest length of a domain name, in bytes.
pub const MAX_DOMAIN_BYTES: usize = 256;

/// A validated ownership domain (`"customer-42"`, `"shard-7"`).
///
/// Tokens are comparable only inside one domain. A domain is non-empty, at most
/// [`MAX_DOMAIN_BYTES`] bytes and free of control characters; cloning is cheap.
///
/// ```
/// use fence_core::Domain;
/// let domain = Domain::new("customer-42")?;
/// assert_eq!(domain.as_str(), "customer-42");
/// assert!(Domain::new("").is_err());
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Domain(Arc<str>);

impl Domain {
    /// Validates and wraps a domain name.
    pub fn new(name: impl AsRef<str>) -> Result<Self, InvalidInput> {
        let name = name.as_ref();
        if name.is_empty() {
            return Err(InvalidInput::EmptyDomain);
        }
        if name.len() > MAX_DOMAIN_BYTES {
            return Err(InvalidInput::DomainTooLong {
                len: name.len(),
                max: MAX_DOMAIN_BYTES,
            });
        }
        if let Some((position, _)) = name.char_indices().find(|(_, c)| c.is_control()) {
            return Err(InvalidInput::DomainControlCharacter { position });
        }
        Ok(Domain(Arc::from(name)))
    }

    /// The domain name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// An injective, backend-safe spelling of the domain: ASCII letters, digits, `.`, `_` and
    /// `-` stay; every other byte (including `%`, `{`, `}`, `/` and `:`) becomes `%XX`.
    ///
    /// Two different domains never share an escaped form, so adapters use it to build Redis
    /// keys and hash tags, object names and Kafka transactional ids.
    ///
    /// ```
    /// use fence_core::Domain;
    /// assert_eq!(Domain::new("a{b}/c")?.escaped(), "a%7Bb%7D%2Fc");
    /// # Ok::<(), fence_core::InvalidInput>(())
    /// ```
    pub fn escaped(&self) -> String {
        percent_encode(&self.0)
    }

    /// Reads back the spelling [`Domain::escaped`] wrote (a key or object name an operator
    /// holds); `None` for anything it never writes.
    ///
    /// ```
    /// use fence_core::Domain;
    /// assert_eq!(Domain::from_escaped("a%7Bb%7D%2Fc"), Some(Domain::new("a{b}/c")?));
    /// assert_eq!(Domain::from_escaped("a/c"), None); // `/` is always escaped
    /// # Ok::<(), fence_core::InvalidInput>(())
    /// ```
    pub fn from_escaped(text: &str) -> Option<Self> {
        let parsed = Domain::new(unescape(text)?).ok()?;
        (parsed.escaped() == text).then_some(parsed)
    }
}

/// Percent-encodes every byte outside `[A-Za-z0-9._-]` as `%XX` (uppercase hex): injective, and
/// safe in keys, object names, identifiers of every backend and URL components.
///
/// ```
/// assert_eq!(fence_core::raw::percent_encode("a b/ç"), "a%20b%2F%C3%A7");
/// ```
pub fn percent_encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        }
    }
    out
}

/// Reverses [`percent_encode`]; `None` for a malformed escape or bytes that are not UTF-8.
pub(crate) fn unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Domain").field(&&*self.0).finish()
    }
}

impl FromStr for Domain {
    type Err = InvalidInput;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Domain::new(s)
    }
}

impl TryFrom<&str> for Domain {
    type Error = InvalidInput;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Domain::new(value)
    }
}

impl TryFrom<String> for Domain {
    type Error = InvalidInput;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Domain::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_long_and_control_characters() {
        assert_eq!(Domain::new(""), Err(InvalidInput::EmptyDomain));
        let long = "x".repeat(MAX_DOMAIN_BYTES + 1);
        assert_eq!(
            Domain::new(&long),
            Err(InvalidInput::DomainTooLong {
                len: MAX_DOMAIN_BYTES + 1,
                max: MAX_DOMAIN_BYTES
            })
        );
        assert!(Domain::new("x".repeat(MAX_DOMAIN_BYTES)).is_ok());
        assert_eq!(
            Domain::new("ab\ncd"),
            Err(InvalidInput::DomainControlCharacter { position: 2 })
        );
        assert_eq!(
            Domain::new("\u{7f}"),
            Err(InvalidInput::DomainControlCharacter { position: 0 })
        );
    }

    #[test]
    fn escaping_is_injective_on_tricky_names() {
        let names = [
            "a", "a%41", "aA", "a{b}", "a%7Bb%7D", "a/b", "a:b", "é", "%C3%A9", "a b", "a+b",
        ];
        let mut seen = std::collections::HashSet::new();
        for name in names {
            let escaped = Domain::new(name).map(|d| d.escaped());
            assert!(escaped.is_ok());
            let escaped = escaped.unwrap_or_default();
            assert!(
                escaped
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-%".contains(&b)),
                "{escaped}"
            );
            assert!(seen.insert(escaped), "collision for {name}");
        }
    }
}
