//! The head of a stored entry — live value or tombstone, the writer's token, the revision —
//! and its one text form, written by adapters that keep it as text (the S3 envelope's `entry`
//! line, etcd's `entry` key):
//!
//! ```text
//! value <token> <revision>
//! tombstone <token> <revision>
//! ```
//!
//! Numbers are canonical decimals (no sign, no leading zero, above 0); anything else fails to
//! parse.

use std::fmt;

use crate::{Entry, FencingToken, Revision};

/// An entry without its bytes.
/// Closed on purpose: a new kind of entry is a new format version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryHead {
    /// A live value.
    Value {
        /// The token that wrote it.
        token: FencingToken,
        /// Its revision.
        revision: Revision,
    },
    /// A tombstone left by a delete.
    Tombstone {
        /// The token that deleted.
        token: FencingToken,
        /// Its revision.
        revision: Revision,
    },
}

impl EntryHead {
    /// The token that wrote the entry.
    pub fn token(self) -> FencingToken {
        match self {
            EntryHead::Value { token, .. } | EntryHead::Tombstone { token, .. } => token,
        }
    }

    /// The entry's revision.
    pub fn revision(self) -> Revision {
        match self {
            EntryHead::Value { revision, .. } | EntryHead::Tombstone { revision, .. } => revision,
        }
    }

    /// The head with its writer token lowered to `mark` if above it (a re-base).
    pub fn capped_at(self, mark: FencingToken) -> EntryHead {
        match self {
            EntryHead::Value { token, revision } => EntryHead::Value {
                token: token.min(mark),
                revision,
            },
            EntryHead::Tombstone { token, revision } => EntryHead::Tombstone {
                token: token.min(mark),
                revision,
            },
        }
    }

    /// True for a live value.
    pub fn is_live(self) -> bool {
        matches!(self, EntryHead::Value { .. })
    }

    /// The head kept as columns by SQL adapters (fence-postgres, fence-mysql): the kind (`v`
    /// value, `t` tombstone), the revision and the writer's token, all absent for a domain
    /// with no entry; the writer never above the domain's `mark`. Anything else is an error
    /// saying what is wrong (the adapter reports it as corrupt state).
    ///
    /// ```
    /// use fence_core::raw::EntryHead;
    /// use fence_core::FencingToken;
    /// let (mark, writer) = (Some(FencingToken::new(9)?), Some(FencingToken::new(7)?));
    /// let head = EntryHead::from_columns(mark, Some(b'v'), Some(3), writer)?;
    /// assert_eq!(head.map(|h| (h.token().get(), h.revision().get())), Some((7, 3)));
    /// assert_eq!(EntryHead::from_columns(mark, None, None, None)?, None);
    /// assert!(EntryHead::from_columns(mark, Some(b'x'), Some(3), writer).is_err());
    /// assert!(EntryHead::from_columns(writer, Some(b'v'), Some(3), mark).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_columns(
        mark: Option<FencingToken>,
        kind: Option<u8>,
        revision: Option<u64>,
        writer: Option<FencingToken>,
    ) -> Result<Option<EntryHead>, String> {
        let (kind, revision, token) = match (kind, revision, writer) {
            (None, None, None) => return Ok(None),
            (Some(kind @ (b'v' | b't')), Some(revision), Some(token)) if revision >= 1 => {
                (kind, Revision::new(revision), token)
            }
            _ => return Err("entry columns are not a value or a tombstone".into()),
        };
        if mark.is_none_or(|mark| token > mark) {
            return Err("writer token above the high-water mark".into());
        }
        Ok(Some(if kind == b'v' {
            EntryHead::Value { token, revision }
        } else {
            EntryHead::Tombstone { token, revision }
        }))
    }

    /// Checks that a stored entry agrees with its value and with the domain's mark `mark`: a
    /// value entry has its bytes (`has_value`), bytes have a value entry, and the entry's token
    /// is at most the mark. The error says what is wrong (the adapter reports it as corrupt
    /// state).
    ///
    /// ```
    /// use fence_core::raw::EntryHead;
    /// use fence_core::{FencingToken, Revision};
    /// let t = |n| FencingToken::new(n).unwrap_or_else(|_| unreachable!());
    /// let head = EntryHead::Value { token: t(3), revision: Revision::new(1) };
    /// assert!(EntryHead::check_stored(Some(head), true, Some(t(3))).is_ok());
    /// assert!(EntryHead::check_stored(Some(head), false, Some(t(3))).is_err());
    /// assert!(EntryHead::check_stored(Some(head), true, Some(t(2))).is_err());
    /// assert!(EntryHead::check_stored(None, true, Some(t(2))).is_err());
    /// ```
    pub fn check_stored(
        head: Option<EntryHead>,
        has_value: bool,
        mark: Option<FencingToken>,
    ) -> Result<(), String> {
        match (head, has_value) {
            (Some(EntryHead::Value { .. }), false) => Err("a value entry without its value".into()),
            (Some(EntryHead::Tombstone { .. }) | None, true) => {
                Err("a value without a value entry".into())
            }
            (Some(head), _) if mark.is_none_or(|mark| head.token() > mark) => Err(format!(
                "the entry's token {} is above the mark {}",
                head.token(),
                mark.map_or_else(|| "(none)".to_owned(), |m| m.to_string())
            )),
            _ => Ok(()),
        }
    }

    /// The entry a read reports for `head` (`None`: nothing written) and the stored `value`:
    /// a live head needs its value, and a tombstone keeps none worth reporting. The error says
    /// what is wrong (the adapter reports it as corrupt state).
    ///
    /// ```
    /// use fence_core::raw::EntryHead;
    /// use fence_core::{Entry, FencingToken, Revision};
    /// let head = EntryHead::Value { token: FencingToken::new(3)?, revision: Revision::new(1) };
    /// assert!(matches!(EntryHead::entry(Some(head), Some(b"v".to_vec())), Ok(Entry::Value { .. })));
    /// assert!(EntryHead::entry(Some(head), None).is_err());
    /// assert_eq!(EntryHead::entry(None, None), Ok(Entry::Absent));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn entry(head: Option<EntryHead>, value: Option<Vec<u8>>) -> Result<Entry, String> {
        Ok(match head {
            None => Entry::Absent,
            Some(EntryHead::Value { token, revision }) => Entry::Value {
                value: value.ok_or("live entry without a value")?.into(),
                token,
                revision,
            },
            Some(EntryHead::Tombstone { token, revision }) => Entry::Tombstone { token, revision },
        })
    }

    /// Parses the text form; the error says what is wrong.
    ///
    /// ```
    /// use fence_core::raw::EntryHead;
    /// let head = EntryHead::parse("tombstone 42 7")?;
    /// assert_eq!((head.token().get(), head.revision().get(), head.is_live()), (42, 7, false));
    /// assert_eq!(head.to_string(), "tombstone 42 7");
    /// assert!(EntryHead::parse("value 42 07").is_err());
    /// assert!(EntryHead::parse("value 42 +7").is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn parse(text: &str) -> Result<EntryHead, String> {
        let token = |s: &str| {
            s.parse::<FencingToken>()
                .map_err(|e| format!("entry token `{s}`: {e}"))
        };
        let revision = |s: &str| {
            crate::token::parse_count(s)
                .map(Revision::new)
                .ok_or_else(|| format!("entry revision `{s}` is not canonical"))
        };
        match text.split(' ').collect::<Vec<_>>()[..] {
            ["value", t, r] => Ok(EntryHead::Value {
                token: token(t)?,
                revision: revision(r)?,
            }),
            ["tombstone", t, r] => Ok(EntryHead::Tombstone {
                token: token(t)?,
                revision: revision(r)?,
            }),
            _ => Err(format!(
                "malformed entry `{}`",
                text.chars().take(60).collect::<String>()
            )),
        }
    }
}

impl fmt::Display for EntryHead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryHead::Value { token, revision } => write!(f, "value {token} {revision}"),
            EntryHead::Tombstone { token, revision } => write!(f, "tombstone {token} {revision}"),
        }
    }
}
