//! The fence envelope stored at the head of every fenced object's body.
//!
//! ```text
//! FENCE-S3/1
//! hwm 42
//! entry value 42 7          (or `entry tombstone 42 7`, or `entry none` after a claim alone)
//! nonce 9f2c4e1a0b3d5c7e
//! op 42 7 41 order-7%2Fpay  (token, revision, previous mark or `-`, escaped op id), newest last
//!
//! <payload bytes>
//! ```
//!
//! The header is text, bounded by [`MAX_HEADER_BYTES`], and parsed strictly: anything else at a
//! fenced key is foreign or corrupt and fails closed. The nonce makes every write's bytes, and so
//! its ETag, unique even when the payload repeats (ETag ABA).

use std::fmt::Write as _;

use fence_core::raw::{EntryHead, OpMemory, OpRecord};
use fence_core::{Domain, FenceError, FencingToken, OpKind};

/// The first line of every envelope.
pub const MAGIC: &[u8] = b"FENCE-S3/1\n";
/// The greatest header size; a cache miss reads this many bytes with a ranged GET.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// An envelope's header: the domain's mark, its entry, the write's nonce and the remembered
/// operation ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The high-water mark.
    pub hwm: FencingToken,
    /// The entry (`None` after a claim alone).
    pub head: Option<EntryHead>,
    /// Unique per write, so that every write's bytes (and ETag) differ.
    pub nonce: u64,
    /// The remembered operation ids, newest last.
    pub ops: OpMemory,
}

/// Why bytes at a fenced key are not a valid envelope.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// No envelope at all: an object written by another tool.
    #[error("no FENCE-S3/1 envelope (written by another tool?)")]
    Foreign,
    /// An envelope that does not parse.
    #[error("damaged FENCE-S3/1 envelope: {0}")]
    Corrupt(String),
}

/// A decoded `FENCE-S3/1` envelope: what a domain's object says about its fence (the format
/// is specified in FORMATS.md). Decoding is strict: the same rules the fence reads with.
///
/// ```
/// let object = b"FENCE-S3/1\nhwm 7\nentry value 7 2\nnonce 00000000000000ff\n\na,b\n";
/// let envelope = fence_objects::Envelope::decode(object)?;
/// assert_eq!(envelope.high_water_mark().get(), 7);
/// assert_eq!(envelope.entry().map(|e| e.to_string()).as_deref(), Some("value 7 2"));
/// assert_eq!(&object[envelope.payload_offset()..], b"a,b\n");
/// # Ok::<(), fence_objects::EnvelopeError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    header: Header,
    payload_offset: usize,
}

impl Envelope {
    /// Decodes the envelope at the start of an object's bytes (a ranged read of the first
    /// 16 KiB is enough).
    pub fn decode(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
        let (header, payload_offset) = Header::decode(bytes)?;
        Ok(Envelope {
            header,
            payload_offset,
        })
    }

    /// The domain's high-water mark.
    pub fn high_water_mark(&self) -> FencingToken {
        self.header.hwm
    }

    /// The entry (value or tombstone, writer token, revision); `None` after a claim alone.
    pub fn entry(&self) -> Option<EntryHead> {
        self.header.head
    }

    /// The write's nonce (it makes every write's ETag unique).
    pub fn nonce(&self) -> u64 {
        self.header.nonce
    }

    /// The operation ids the object remembers, oldest first.
    pub fn ops(&self) -> &OpMemory {
        &self.header.ops
    }

    /// Where the payload starts in the decoded bytes.
    pub fn payload_offset(&self) -> usize {
        self.payload_offset
    }
}

/// A nonce that differs between any two writes of any process.
pub fn fresh_nonce() -> u64 {
    fence_core::raw::random_u64()
}

impl Header {
    /// Encodes the header followed by the blank line that ends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = String::from_utf8_lossy(MAGIC).into_owned();
        let _ = writeln!(text, "hwm {}", self.hwm);
        match self.head {
            None => text.push_str("entry none\n"),
            Some(entry) => {
                let _ = writeln!(text, "entry {entry}");
            }
        }
        let _ = writeln!(text, "nonce {:016x}", self.nonce);
        for op in self.ops.iter() {
            let _ = writeln!(text, "{}", op.to_line());
        }
        text.push('\n');
        text.into_bytes()
    }

    /// Parses the header at the start of `bytes`; returns it and where the payload starts.
    pub fn decode(bytes: &[u8]) -> Result<(Header, usize), EnvelopeError> {
        if !bytes.starts_with(MAGIC) {
            return Err(EnvelopeError::Foreign);
        }
        let corrupt = |why: &str| EnvelopeError::Corrupt(why.to_owned());
        let limit = bytes.len().min(MAX_HEADER_BYTES);
        let end = bytes[..limit]
            .windows(2)
            .position(|w| w == b"\n\n")
            .ok_or_else(|| corrupt("header has no end within its size limit"))?;
        let text = std::str::from_utf8(&bytes[MAGIC.len()..end + 1])
            .map_err(|_| corrupt("header is not UTF-8"))?;
        let token = |s: &str| {
            s.parse::<FencingToken>()
                .map_err(|e| EnvelopeError::Corrupt(format!("token `{s}`: {e}")))
        };
        let mut lines = text.lines();
        let mut next = |what: &str| {
            lines
                .next()
                .ok_or_else(|| EnvelopeError::Corrupt(format!("missing `{what}` line")))
        };
        let hwm = match next("hwm")?.split(' ').collect::<Vec<_>>()[..] {
            ["hwm", t] => token(t)?,
            _ => return Err(corrupt("malformed `hwm` line")),
        };
        let head = match next("entry")?.strip_prefix("entry ") {
            Some("none") => None,
            Some(entry) => Some(EntryHead::parse(entry).map_err(EnvelopeError::Corrupt)?),
            None => return Err(corrupt("malformed `entry` line")),
        };
        let nonce = match next("nonce")?.split(' ').collect::<Vec<_>>()[..] {
            ["nonce", n] if n.len() == 16 => {
                u64::from_str_radix(n, 16).map_err(|_| corrupt("malformed nonce"))?
            }
            _ => return Err(corrupt("malformed `nonce` line")),
        };
        let mut ops = Vec::new();
        for line in lines {
            if line.starts_with("op ") {
                ops.push(
                    OpRecord::parse_line(line, OpKind::Write).map_err(EnvelopeError::Corrupt)?,
                );
            } else {
                return Err(EnvelopeError::Corrupt(format!(
                    "unknown header line `{}`",
                    line.chars().take(60).collect::<String>()
                )));
            }
        }
        let ops = OpMemory::from_records(ops);
        if let Some(entry) = head {
            if entry.token() > hwm {
                return Err(corrupt("writer token above the high-water mark"));
            }
        }
        Ok((
            Header {
                hwm,
                head,
                nonce,
                ops,
            },
            end + 2,
        ))
    }
}

/// Decodes an envelope at `key`, mapping foreign or corrupt bytes to `CorruptState` of
/// `backend`.
pub fn decode(
    backend: &'static str,
    domain: &Domain,
    key: &str,
    bytes: &[u8],
) -> Result<(Header, usize), FenceError> {
    Header::decode(bytes).map_err(|invalid| match invalid {
        EnvelopeError::Foreign => FenceError::corrupt(
            backend,
            domain,
            format!("object `{key}` has no fence envelope (written by another tool?); adopt it explicitly to fence it"),
        ),
        EnvelopeError::Corrupt(why) => FenceError::corrupt(backend, domain, format!("object `{key}`: {why}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fence_core::Revision;

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    fn sample() -> Header {
        Header {
            hwm: t(u64::MAX),
            head: Some(EntryHead::Value {
                token: t(41),
                revision: Revision::new(7),
            }),
            nonce: 0x0123_4567_89ab_cdef,
            ops: OpMemory::from_records([OpRecord::new(
                t(41),
                fence_core::OperationId::new("order-7/pay").unwrap_or_else(|_| unreachable!()),
                None,
                fence_core::OpOutcome::Write {
                    revision: Revision::new(7),
                },
            )]),
        }
    }

    #[test]
    fn round_trips_and_finds_the_payload() {
        let mut bytes = sample().encode();
        bytes.extend_from_slice(b"payload\n\nwith blank lines");
        let (header, offset) = Header::decode(&bytes)
            .map_err(|e| format!("{e:?}"))
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(header, sample());
        assert_eq!(&bytes[offset..], b"payload\n\nwith blank lines");
    }

    #[test]
    fn foreign_and_corrupt_headers_are_refused() {
        assert_eq!(
            Header::decode(b"just some file"),
            Err(EnvelopeError::Foreign)
        );
        let good = String::from_utf8(sample().encode()).unwrap_or_default();
        for (from, to) in [
            ("hwm 18446744073709551615", "hwm 18446744073709551616"),
            ("hwm 18446744073709551615", "hwm 007"),
            (
                "hwm 18446744073709551615",
                "hwm 1234567890123456789012345678",
            ),
            ("hwm 18446744073709551615", "hwm -1"),
            ("entry value 41 7", "entry value 41 07"),
            ("entry value 41 7", "entry maybe 41 7"),
            ("nonce 0123456789abcdef", "nonce xyz"),
            ("op 41 7 - order-7%2Fpay", "op 41 7 - order 7"),
            ("op 41 7 - order-7%2Fpay", "extra line"),
        ] {
            let bad = good.replace(from, to);
            assert!(
                matches!(
                    Header::decode(bad.as_bytes()),
                    Err(EnvelopeError::Corrupt(_))
                ),
                "{to}"
            );
        }
        let above = good.replace("hwm 18446744073709551615", "hwm 40");
        assert!(
            matches!(
                Header::decode(above.as_bytes()),
                Err(EnvelopeError::Corrupt(_))
            ),
            "writer above mark"
        );
        let unterminated = good.trim_end_matches('\n').to_owned() + "\n";
        assert!(matches!(
            Header::decode(unterminated.as_bytes()),
            Err(EnvelopeError::Corrupt(_))
        ));
    }

    #[test]
    fn nonces_differ() {
        let nonces: std::collections::HashSet<u64> = (0..10_000).map(|_| fresh_nonce()).collect();
        assert_eq!(nonces.len(), 10_000);
    }
}
