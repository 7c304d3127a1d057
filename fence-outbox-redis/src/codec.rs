//! One entry's immutable record, packed into one hash field: `<recorded ms>|<token>\n` then
//! `<len>:<key><len>:<kind><len>:<destination>` then the payload. Rust packs everything after
//! the `|`; the script prepends the server's time.

use bytes::Bytes;

/// What the transition script stores after `<recorded ms>|`.
pub(crate) fn pack(
    token: &str,
    key: &str,
    kind: &str,
    destination: &str,
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        token.len() + key.len() + kind.len() + destination.len() + payload.len() + 24,
    );
    out.extend_from_slice(token.as_bytes());
    out.push(b'\n');
    for part in [key, kind, destination] {
        out.extend_from_slice(part.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(part.as_bytes());
    }
    out.extend_from_slice(payload);
    out
}

/// An entry's stored record, unpacked (FORMATS.md §5.2): for tools that read the outbox's
/// entries hash directly (`fence decode redis-outbox-entry`).
///
/// ```
/// let stored = b"1700000000123|7\n18:order%2F42:7:pay:011:charge-card4:mail{}";
/// let record = fence_outbox_redis::PackedRecord::decode(stored)?;
/// assert_eq!((record.recorded_at_ms, record.token.as_str()), (1_700_000_000_123, "7"));
/// assert_eq!((record.key.as_str(), &record.payload[..]), ("order%2F42:7:pay:0", &b"{}"[..]));
/// # Ok::<(), fence_outbox_redis::PackedRecordError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PackedRecord {
    /// When it was recorded (ms since the Unix epoch, the server's clock).
    pub recorded_at_ms: u64,
    /// The recording transition's token, as stored (decimal text).
    pub token: String,
    /// The idempotency key.
    pub key: String,
    /// The effect kind.
    pub kind: String,
    /// The destination.
    pub destination: String,
    /// The payload.
    pub payload: Bytes,
}

/// Why bytes are not a packed outbox record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("damaged outbox record: {reason}")]
pub struct PackedRecordError {
    /// What is malformed.
    pub reason: &'static str,
}

impl PackedRecord {
    /// Unpacks a stored record.
    pub fn decode(record: &[u8]) -> Result<Self, PackedRecordError> {
        unpack(record).map_err(|reason| PackedRecordError { reason })
    }
}

/// Unpacks a stored record; the error says what is malformed.
pub(crate) fn unpack(record: &[u8]) -> Result<PackedRecord, &'static str> {
    let bar = record
        .iter()
        .position(|&b| b == b'|')
        .ok_or("no record time")?;
    let recorded_at_ms = text(&record[..bar])?
        .parse()
        .map_err(|_| "bad record time")?;
    let rest = &record[bar + 1..];
    let newline = rest.iter().position(|&b| b == b'\n').ok_or("no token")?;
    let token = text(&rest[..newline])?;
    // The script stores the transition's canonical token; anything else is damage.
    if token.parse::<fence_core::FencingToken>().is_err() {
        return Err("token is not a canonical u64 token");
    }
    let token = token.to_owned();
    let mut rest = &rest[newline + 1..];
    let mut parts = Vec::with_capacity(3);
    for _ in 0..3 {
        let colon = rest
            .iter()
            .position(|&b| b == b':')
            .ok_or("truncated field")?;
        let len: usize = text(&rest[..colon])?
            .parse()
            .map_err(|_| "bad field length")?;
        let start = colon + 1;
        // A stored length is untrusted: it may point past the record, or past usize::MAX.
        let end = start.checked_add(len).ok_or("truncated field")?;
        let field = rest.get(start..end).ok_or("truncated field")?;
        parts.push(text(field)?.to_owned());
        rest = &rest[end..];
    }
    let [key, kind, destination] = <[String; 3]>::try_from(parts).map_err(|_| "truncated field")?;
    Ok(PackedRecord {
        recorded_at_ms,
        token,
        key,
        kind,
        destination,
        payload: Bytes::copy_from_slice(rest),
    })
}

fn text(bytes: &[u8]) -> Result<&str, &'static str> {
    std::str::from_utf8(bytes).map_err(|_| "field is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let packed = pack(
            "18446744073709551615",
            "d:1:op:0",
            "send-email",
            "https://x/y?a=1:2",
            b"a|b\n3:c\0",
        );
        let mut stored = b"1795990000123|".to_vec();
        stored.extend_from_slice(&packed);
        let unpacked = unpack(&stored);
        assert_eq!(
            unpacked,
            Ok(PackedRecord {
                recorded_at_ms: 1_795_990_000_123,
                token: "18446744073709551615".into(),
                key: "d:1:op:0".into(),
                kind: "send-email".into(),
                destination: "https://x/y?a=1:2".into(),
                payload: Bytes::from_static(b"a|b\n3:c\0"),
            })
        );
        let empty = [b"1|7\n0:0:0:".as_slice()].concat();
        assert!(unpack(&empty).is_ok_and(|u| u.payload.is_empty() && u.key.is_empty()));
        for bad in [
            &b""[..],
            b"12",
            b"x|7\n1:a1:b1:c",
            b"1|7",
            b"1|7\n9:a",
            b"1|7\n1:a1:b",
            b"1|7\nz:a",
            b"1|7\n18446744073709551615:x",
            b"1|abc\n1:a1:b1:c",
            b"1|07\n1:a1:b1:c",
            b"1|7\n1:a18446744073709551615:x",
        ] {
            assert!(unpack(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
