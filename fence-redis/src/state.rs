//! A domain's state hash (FORMATS.md §3.2) decoded outside Redis, for tools that read the hash
//! itself (`fence decode redis-state`). The fence decides with the scripts' `load_state`
//! (lua/prelude.lua), run inside Redis; `tests/state_hash.rs` feeds both the same hashes on a
//! real server and checks that they accept and refuse alike.

use fence_core::Bytes;
use fence_core::{Domain, Entry, FenceError, FencingToken, Operation, Revision, Snapshot};
use redis::Value;

use crate::error::{map_error, BACKEND};
use crate::fence::RedisFence;

/// The fields the format reads: the marker, the mark, the entry's head, then the value; any
/// other field is ignored (later versions may add some).
pub const STATE_FIELDS: [&str; 6] = ["fence", "hwm", "rev", "tok", "state", "val"];

/// Why a hash is not a valid state hash: the reader fails closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a valid fence state hash: {reason}")]
pub struct StateHashError {
    /// What is wrong, in the words the scripts use.
    pub reason: String,
}

/// Decodes a domain's state hash from its fields (as `HGETALL` answers them): the mark and the
/// entry, validated as the scripts validate them.
///
/// No fields at all is a domain with no mark (Redis never keeps an empty hash).
///
/// ```
/// use fence_core::Entry;
/// let fields = [("fence", "1"), ("hwm", "7"), ("rev", "3"), ("tok", "7"), ("state", "v"), ("val", "paid")];
/// let fields: Vec<(Vec<u8>, Vec<u8>)> =
///     fields.iter().map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
/// let snapshot = fence_redis::decode_state(&fields)?;
/// assert_eq!(snapshot.high_water_mark.map(|t| t.get()), Some(7));
/// assert!(matches!(&snapshot.entry, Entry::Value { value, revision, .. } if &value[..] == b"paid" && revision.get() == 3));
///
/// let foreign = vec![(b"name".to_vec(), b"someone else's hash".to_vec())];
/// assert!(fence_redis::decode_state(&foreign).is_err());
/// # Ok::<(), fence_redis::StateHashError>(())
/// ```
pub fn decode_state(fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Snapshot, StateHashError> {
    let bad = |reason: &str| StateHashError {
        reason: reason.to_owned(),
    };
    let mut known: [Option<&[u8]>; 6] = [None; 6];
    for (name, value) in fields {
        let Some(i) = STATE_FIELDS
            .iter()
            .position(|f| f.as_bytes() == name.as_slice())
        else {
            continue;
        };
        let slot = &mut known[i];
        if slot.replace(value.as_slice()).is_some() {
            return Err(bad(&format!(
                "field `{}` twice",
                String::from_utf8_lossy(name)
            )));
        }
    }
    let [marker, hwm, rev, tok, state, val] = known;
    if fields.is_empty() {
        return Ok(Snapshot::new(None, Entry::Absent));
    }
    // A hash without any of the head fields is someone else's (a `val` alone included).
    if known[..5].iter().all(Option::is_none) || marker != Some(b"1") {
        return Err(bad("hash has no fence format marker"));
    }
    let token = |field: Option<&[u8]>| {
        std::str::from_utf8(field?)
            .ok()?
            .parse::<FencingToken>()
            .ok()
    };
    let hwm = token(hwm).ok_or_else(|| bad("high-water mark is not a canonical u64 token"))?;
    let entry = match state {
        None if rev.is_some() || tok.is_some() => {
            return Err(bad("revision or writer token without an entry"))
        }
        None => Entry::Absent,
        Some(state) => {
            if state != b"v" && state != b"t" {
                return Err(bad("unknown entry state"));
            }
            let revision = rev
                .filter(|r| {
                    (1..=15).contains(&r.len()) && r[0] != b'0' && r.iter().all(u8::is_ascii_digit)
                })
                .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok())
                .map(Revision::new)
                .ok_or_else(|| bad("revision is not a canonical number"))?;
            let writer =
                token(tok).ok_or_else(|| bad("writer token is not a canonical u64 token"))?;
            if writer > hwm {
                return Err(bad("writer token above the high-water mark"));
            }
            if state == b"t" {
                Entry::Tombstone {
                    token: writer,
                    revision,
                }
            } else {
                let value = val.ok_or_else(|| bad("live entry without a value"))?;
                Entry::Value {
                    value: Bytes::copy_from_slice(value),
                    token: writer,
                    revision,
                }
            }
        }
    };
    Ok(Snapshot::new(Some(hwm), entry))
}

impl RedisFence {
    /// The fields of `domain`'s state hash as Redis holds them (`HGETALL`), undecoded: for
    /// tools that show or decode the stored bytes (see [`decode_state`]). Empty when the
    /// domain has no state; a key of another type is corrupt state.
    pub async fn state_fields(
        &self,
        domain: &Domain,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, FenceError> {
        let key = self.inner.keys.state(domain);
        let connection = self.connection(Some(domain)).await?;
        let reply = connection
            .query(redis::cmd("HGETALL").arg(&key))
            .await
            .map_err(|e| {
                if e.code() == Some("WRONGTYPE") {
                    FenceError::corrupt(BACKEND, domain, format!("key {key} is not a hash"))
                } else {
                    map_error(e, Some(domain), Operation::Read, false)
                }
            })?;
        let corrupt = || {
            FenceError::corrupt(
                BACKEND,
                domain,
                format!("unexpected HGETALL answer for {key}"),
            )
        };
        let items = match reply {
            Value::Map(pairs) => pairs,
            Value::Array(items) => {
                let mut pairs = Vec::with_capacity(items.len() / 2);
                let mut items = items.into_iter();
                while let (Some(field), Some(value)) = (items.next(), items.next()) {
                    pairs.push((field, value));
                }
                pairs
            }
            _ => return Err(corrupt()),
        };
        items
            .into_iter()
            .map(|pair| match pair {
                (Value::BulkString(field), Value::BulkString(value)) => Ok((field, value)),
                _ => Err(corrupt()),
            })
            .collect()
    }

    /// The name of `domain`'s state hash (`<prefix>:{<escaped domain>}:state`).
    pub fn state_key(&self, domain: &Domain) -> String {
        self.inner.keys.state(domain)
    }

    /// The domain whose key `key` is (`<prefix>:{<escaped domain>}:…` under this fence's
    /// prefix), or `None` for a key this fence never names. Which of the domain's keys it is
    /// is the caller's to check (compare with [`RedisFence::state_key`]).
    pub fn domain_of_key(&self, key: &str) -> Option<Domain> {
        let rest = key
            .strip_prefix(self.inner.keys.prefix())?
            .strip_prefix(":{")?;
        let (escaped, _) = rest.split_once("}:")?;
        Domain::from_escaped(escaped)
    }
}
