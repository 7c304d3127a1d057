//! Fencing tokens and the other identifiers a request carries.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::Arc;

use crate::InvalidInput;

/// A fencing token: a number greater than zero, strictly increasing per domain with every
/// successful lease acquisition.
///
/// Zero is unrepresentable; parsing accepts only canonical decimal `u64` text.
///
/// ```
/// use fence_core::FencingToken;
/// let token: FencingToken = "42".parse()?;
/// assert_eq!(token.get(), 42);
/// assert!("0".parse::<FencingToken>().is_err());
/// assert!("042".parse::<FencingToken>().is_err());
/// assert!(FencingToken::new(0).is_err());
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(NonZeroU64);

impl FencingToken {
    /// The smallest token.
    pub const MIN: FencingToken = FencingToken(NonZeroU64::MIN);
    /// The greatest token.
    pub const MAX: FencingToken = FencingToken(NonZeroU64::MAX);

    /// Wraps a token, refusing zero.
    pub fn new(value: u64) -> Result<Self, InvalidInput> {
        NonZeroU64::new(value)
            .map(FencingToken)
            .ok_or(InvalidInput::ZeroToken)
    }

    /// The token's value.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// The next token, or `None` at `u64::MAX` (tokens never wrap around).
    pub fn next(self) -> Option<Self> {
        self.0.checked_add(1).map(FencingToken)
    }

    /// The token as exactly 20 decimal digits, zero-padded, so that byte-wise comparison of two
    /// such strings orders them as numbers. Backends without exact 64-bit integers (Redis Lua
    /// numbers are doubles) compare tokens in this form.
    ///
    /// ```
    /// use fence_core::FencingToken;
    /// assert_eq!(FencingToken::new(7)?.to_fixed_width(), "00000000000000000007");
    /// # Ok::<(), fence_core::InvalidInput>(())
    /// ```
    pub fn to_fixed_width(self) -> String {
        format!("{:020}", self.get())
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl TryFrom<u64> for FencingToken {
    type Error = InvalidInput;

    fn try_from(value: u64) -> Result<Self, Self::Error> {
        FencingToken::new(value)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.get()
    }
}

impl FromStr for FencingToken {
    type Err = InvalidInput;

    /// Parses canonical decimal: digits only, no sign, no leading zero, no whitespace, at most
    /// `u64::MAX`. A token that travels in a header or a stored envelope is parsed with this.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let refuse = |reason| InvalidInput::UnparsableToken {
            input: input.chars().take(40).collect(),
            reason,
        };
        if input.is_empty() {
            return Err(refuse("empty"));
        }
        if !input.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refuse("not a decimal number"));
        }
        if input == "0" {
            return Err(InvalidInput::ZeroToken);
        }
        if input.starts_with('0') {
            return Err(refuse("leading zero"));
        }
        let value: u64 = input.parse().map_err(|_| refuse("above u64::MAX"))?;
        FencingToken::new(value)
    }
}

/// The greatest length of an operation id or lease owner id, in bytes.
pub const MAX_IDENTIFIER_BYTES: usize = 128;

/// Refuses text that is empty, longer than `max` bytes, or holds a control character.
pub(crate) fn validate_text(what: &'static str, id: &str, max: usize) -> Result<(), InvalidInput> {
    if id.is_empty() {
        return Err(InvalidInput::EmptyIdentifier { what });
    }
    if id.len() > max {
        return Err(InvalidInput::IdentifierTooLong {
            what,
            len: id.len(),
            max,
        });
    }
    if let Some((position, _)) = id.char_indices().find(|(_, c)| c.is_control()) {
        return Err(InvalidInput::IdentifierControlCharacter { what, position });
    }
    Ok(())
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            #[doc = concat!("Validates a ", $what, ": non-empty, at most [`MAX_IDENTIFIER_BYTES`] bytes, no control characters.")]
            pub fn new(id: impl AsRef<str>) -> Result<Self, InvalidInput> {
                let id = id.as_ref();
                validate_text($what, id, MAX_IDENTIFIER_BYTES)?;
                Ok($name(Arc::from(id)))
            }

            #[doc = concat!("The ", $what, " as given.")]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            #[doc = concat!("An injective, backend-safe spelling of the ", $what, " (see [`crate::Domain::escaped`]).")]
            pub fn escaped(&self) -> String {
                crate::domain::percent_encode(&self.0)
            }

            #[doc = concat!("Reads back the spelling [`", stringify!($name), "::escaped`] wrote; `None` for anything it never writes.")]
            pub fn from_escaped(text: &str) -> Option<Self> {
                let id = crate::domain::unescape(text)?;
                let parsed = Self::new(&id).ok()?;
                (parsed.escaped() == text).then_some(parsed)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($name)).field(&&*self.0).finish()
            }
        }

        impl FromStr for $name {
            type Err = InvalidInput;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::new(s)
            }
        }
    };
}

identifier!(
    /// The idempotency key of one logical operation. A retry of the same (domain, token,
    /// operation id) returns the first outcome instead of applying twice.
    ///
    /// ```
    /// use fence_core::OperationId;
    /// assert!(OperationId::new("invoice-7/send").is_ok());
    /// assert!(OperationId::new("").is_err());
    /// ```
    OperationId,
    "operation id"
);

identifier!(
    /// The identity of a lease holder (a worker id, a host name and pid).
    OwnerId,
    "lease owner"
);

/// The data's own version at the resource: it grows by one with every accepted write or delete
/// of a domain (claims leave it alone). Used for compare-and-set independent of the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Revision(u64);

impl Revision {
    /// Wraps a revision number.
    pub const fn new(value: u64) -> Self {
        Revision(value)
    }

    /// The revision's number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The revision after this one, saturating at `u64::MAX`.
    pub const fn next(self) -> Self {
        Revision(self.0.saturating_add(1))
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A positive count in canonical decimal (FORMATS.md §1.2: digits only, no sign, no leading
/// zero): the one reader of the counts and revisions in Fence's text formats.
///
/// ```
/// assert_eq!(fence_core::raw::parse_count("42"), Some(42));
/// for bad in ["0", "042", "+4", " 4", "4x", "", "18446744073709551616"] {
///     assert_eq!(fence_core::raw::parse_count(bad), None, "{bad:?}");
/// }
/// ```
pub fn parse_count(text: &str) -> Option<u64> {
    if text.starts_with('0') || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_identifiers_read_back_and_nothing_else_does() {
        for id in ["worker-1", "a b/ç", "%41"] {
            let owner = OwnerId::new(id).unwrap_or_else(|e| unreachable!("{e}"));
            assert_eq!(OwnerId::from_escaped(&owner.escaped()), Some(owner));
        }
        for never_written in ["a b", "%41", "%4", "", "%0A"] {
            assert_eq!(
                OwnerId::from_escaped(never_written),
                None,
                "{never_written}"
            );
        }
    }

    fn reason(input: &str) -> Option<&'static str> {
        match input.parse::<FencingToken>() {
            Err(InvalidInput::UnparsableToken { reason, .. }) => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn parses_only_canonical_decimal() {
        assert_eq!("1".parse::<FencingToken>().map(FencingToken::get), Ok(1));
        assert_eq!(
            "18446744073709551615".parse::<FencingToken>(),
            Ok(FencingToken::MAX)
        );
        assert_eq!("0".parse::<FencingToken>(), Err(InvalidInput::ZeroToken));
        assert_eq!(reason(""), Some("empty"));
        assert_eq!(reason("00"), Some("leading zero"));
        assert_eq!(reason("007"), Some("leading zero"));
        assert_eq!(reason("-1"), Some("not a decimal number"));
        assert_eq!(reason("+1"), Some("not a decimal number"));
        assert_eq!(reason(" 1"), Some("not a decimal number"));
        assert_eq!(reason("1.0"), Some("not a decimal number"));
        assert_eq!(reason("abc"), Some("not a decimal number"));
        assert_eq!(reason("18446744073709551616"), Some("above u64::MAX"));
        assert_eq!(reason(&"9".repeat(30)), Some("above u64::MAX"));
    }

    #[test]
    fn fixed_width_orders_like_numbers() {
        let values = [1, 9, 10, (1 << 53) - 1, 1 << 53, (1 << 53) + 1, u64::MAX];
        let padded: Vec<String> = values
            .iter()
            .filter_map(|&v| FencingToken::new(v).ok())
            .map(FencingToken::to_fixed_width)
            .collect();
        assert_eq!(padded.len(), values.len());
        for pair in padded.windows(2) {
            assert!(pair[0] < pair[1], "{pair:?}");
        }
        assert_eq!(FencingToken::MAX.to_fixed_width().len(), 20);
    }

    #[test]
    fn next_never_wraps() {
        assert_eq!(FencingToken::MAX.next(), None);
        assert_eq!(FencingToken::MIN.next().map(FencingToken::get), Some(2));
    }

    #[test]
    fn identifiers_are_validated() {
        assert_eq!(
            OperationId::new(""),
            Err(InvalidInput::EmptyIdentifier {
                what: "operation id"
            })
        );
        assert!(matches!(
            OperationId::new("x".repeat(MAX_IDENTIFIER_BYTES + 1)),
            Err(InvalidInput::IdentifierTooLong { .. })
        ));
        assert!(matches!(
            OwnerId::new("a\tb"),
            Err(InvalidInput::IdentifierControlCharacter {
                what: "lease owner",
                position: 1
            })
        ));
        assert!(OperationId::new("x".repeat(MAX_IDENTIFIER_BYTES)).is_ok());
    }
}
