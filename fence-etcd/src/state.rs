//! A domain's store keys as read in one range request, their text encodings, and the txn
//! parts that replace them.

use etcd_client::{Compare, CompareOp, KeyValue, TxnOp};
use fence_core::raw::pipeline::Current;
use fence_core::raw::{EntryHead, OpMemory, OpRecord};
use fence_core::{Domain, Entry, FenceError, FencingToken, OpKind, Snapshot};

use crate::error::corrupt;
use crate::keys::{Keys, StoreKey};
use crate::settings::Settings;

/// The first word of the state key's value; another layout of it will change it.
pub(crate) const STATE_MARKER: &str = "fence-store/2";

/// The remembered operations as the `ops` key's text: one op line each, newest last.
pub(crate) fn encode_ops(ops: &OpMemory) -> String {
    ops.iter().map(|op| op.to_line() + "\n").collect()
}

/// The state key's value: `fence-store/2 <mark> <entry head | none>`, LF, then the value's
/// bytes (none unless the entry is a value).
pub(crate) fn encode_state(
    mark: FencingToken,
    head: Option<EntryHead>,
    value: Option<&[u8]>,
) -> Vec<u8> {
    let entry = head.map_or_else(|| "none".to_owned(), |head| head.to_string());
    let mut bytes = format!("{STATE_MARKER} {mark} {entry}\n").into_bytes();
    bytes.extend_from_slice(value.unwrap_or_default());
    bytes
}

/// The mark, entry and value a state key holds; the error says what is wrong.
type StateParts = (FencingToken, Option<EntryHead>, Option<Vec<u8>>);

fn decode_state(mut bytes: Vec<u8>) -> Result<StateParts, String> {
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("the state key has no header line")?;
    let payload = bytes.split_off(end + 1);
    let header = std::str::from_utf8(&bytes[..end])
        .map_err(|_| "the state key's header is not UTF-8".to_owned())?;
    let clip = |text: &str| text.chars().take(40).collect::<String>();
    let mut words = header.splitn(3, ' ');
    if words.next() != Some(STATE_MARKER) {
        return Err(format!(
            "the state key's header `{}` does not start with `{STATE_MARKER} `",
            clip(header)
        ));
    }
    let mark_text = words.next().unwrap_or_default();
    let mark = mark_text
        .parse()
        .map_err(|e| format!("mark `{}`: {e}", clip(mark_text)))?;
    let head = match words.next() {
        Some("none") => None,
        Some(text) => Some(EntryHead::parse(text)?),
        None => return Err("the state key's header has no entry".to_owned()),
    };
    let value = match head {
        Some(EntryHead::Value { .. }) => Some(payload),
        _ if payload.is_empty() => None,
        _ => return Err("value bytes in a state without a value entry".to_owned()),
    };
    Ok((mark, head, value))
}

/// What etcd holds for a domain.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stored {
    pub(crate) mark: Option<FencingToken>,
    /// The `mod_revision` of the key every change of the domain rewrites (0: none): the state
    /// key, or a layout-1 folder's mark key. A txn comparing it changes nothing if the domain
    /// changed since the read.
    pub(crate) version: i64,
    /// The folder is of layout 1 (`mark`, `entry`, `value` keys): its next change replaces
    /// them with the state key.
    pub(crate) layout_1: bool,
    pub(crate) head: Option<EntryHead>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) ops: OpMemory,
    /// The token of the domain's live lease (its lock key's `create_revision`), read with the
    /// folder when issued-only is in force (else `None`).
    pub(crate) live_lease: Option<FencingToken>,
    /// The prefix's settings, read with the folder.
    pub(crate) settings: Settings,
}

/// The live lease's token from the lock key as read (`kvs`: nothing, or the key): its
/// `create_revision`. A lock key under no lease is not Fence's (it would never expire).
pub(crate) fn live_lease(
    domain: &Domain,
    kvs: &[KeyValue],
) -> Result<Option<FencingToken>, FenceError> {
    let Some(kv) = kvs.first() else {
        return Ok(None);
    };
    if kv.lease() == 0 {
        return Err(corrupt(
            domain,
            "the lease's lock key is under no etcd lease",
        ));
    }
    let revision = u64::try_from(kv.create_revision()).unwrap_or(0);
    FencingToken::new(revision)
        .map(Some)
        .map_err(|_| corrupt(domain, "the lease's lock key has no creation revision"))
}

impl Stored {
    /// Decodes the keys under the domain's store folder (`dir`), failing closed on anything
    /// Fence did not write.
    pub(crate) fn decode(
        domain: &Domain,
        dir: &str,
        kvs: Vec<KeyValue>,
    ) -> Result<Self, FenceError> {
        let mut stored = Stored::default();
        // The newest `mod_revision` of the keys other than the versioned one.
        let (mut seen, mut has_state, mut newest) = (false, false, 0);
        for kv in kvs {
            seen = true;
            let name = kv.key().strip_prefix(dir.as_bytes()).unwrap_or(kv.key());
            let key = StoreKey::ALL
                .into_iter()
                .find(|k| k.name().as_bytes() == name)
                .ok_or_else(|| {
                    corrupt(
                        domain,
                        format!(
                            "foreign key `{}` in the domain's folder",
                            String::from_utf8_lossy(kv.key())
                        ),
                    )
                })?;
            if kv.lease() != 0 {
                // It would vanish with the lease, and the mark with it.
                return Err(corrupt(
                    domain,
                    format!("store key `{}` is under an etcd lease", key.name()),
                ));
            }
            let revision = kv.mod_revision();
            let (_, value) = kv.into_key_value();
            let text = |what: &str| {
                String::from_utf8(value.clone())
                    .map_err(|_| corrupt(domain, format!("the {what} key is not UTF-8")))
            };
            match key {
                StoreKey::State => {
                    let (mark, head, value) =
                        decode_state(value).map_err(|why| corrupt(domain, why))?;
                    (stored.mark, stored.head, stored.value) = (Some(mark), head, value);
                    (stored.version, has_state) = (revision, true);
                    continue;
                }
                StoreKey::Mark => {
                    let text = text("mark")?;
                    stored.mark = Some(text.parse().map_err(|e| {
                        corrupt(
                            domain,
                            format!("mark `{}`: {e}", text.chars().take(40).collect::<String>()),
                        )
                    })?);
                    (stored.version, stored.layout_1) = (revision, true);
                    continue;
                }
                StoreKey::Entry => {
                    stored.head =
                        Some(EntryHead::parse(&text("entry")?).map_err(|e| corrupt(domain, e))?);
                    stored.layout_1 = true;
                }
                StoreKey::Value => (stored.value, stored.layout_1) = (Some(value), true),
                StoreKey::Ops => {
                    let records = text("ops")?
                        .lines()
                        .map(|line| OpRecord::parse_line(line, OpKind::Write))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| corrupt(domain, e))?;
                    stored.ops = OpMemory::from_records(records);
                }
            }
            newest = newest.max(revision);
        }
        stored.check(domain, (seen, has_state), newest)?;
        Ok(stored)
    }

    /// The keys must agree with each other.
    fn check(
        &self,
        domain: &Domain,
        (seen, has_state): (bool, bool),
        newest: i64,
    ) -> Result<(), FenceError> {
        let Some(mark) = self.mark else {
            return if seen {
                Err(corrupt(domain, "store keys without a mark"))
            } else {
                Ok(())
            };
        };
        if self.layout_1 && has_state {
            return Err(corrupt(
                domain,
                "the folder holds the state key and layout 1's mark, entry or value keys",
            ));
        }
        if newest > self.version {
            // Every change rewrites the versioned key (state; layout 1: mark) with the others.
            return Err(corrupt(
                domain,
                "a key of the folder was changed after its state (not by Fence)",
            ));
        }
        EntryHead::check_stored(self.head, self.value.is_some(), Some(mark))
            .map_err(|why| corrupt(domain, why))
    }

    /// The compares that hold while the domain is as read: the key every change rewrites at
    /// the version read and the `ops` key not newer than it (each one key) or, where no state
    /// key was read (no keys yet, or a layout-1 folder), no key of the folder changed since.
    pub(crate) fn unchanged(&self, keys: &Keys, domain: &Domain) -> Vec<Compare> {
        let versioned = if self.layout_1 {
            StoreKey::Mark
        } else {
            StoreKey::State
        };
        let mut compares = vec![Compare::mod_revision(
            keys.store(domain, versioned),
            CompareOp::Equal,
            self.version,
        )];
        compares.push(if self.version == 0 || self.layout_1 {
            Compare::mod_revision(keys.store_dir(domain), CompareOp::Less, self.version + 1)
                .with_prefix()
        } else {
            // Fence changes `ops` only with the state: a newer one was written around it, and
            // a write must not carry it on as its own.
            Compare::mod_revision(
                keys.store(domain, StoreKey::Ops),
                CompareOp::Less,
                self.version + 1,
            )
        });
        compares
    }

    /// The changes that make the domain's state `mark`, `head` and `value`: one put of the
    /// state key (a layout-1 folder's parts deleted with it). A value entry needs its value
    /// (a cached state has none: read the domain first).
    pub(crate) fn replace(
        &self,
        keys: &Keys,
        domain: &Domain,
        (mark, head, value): (FencingToken, Option<EntryHead>, Option<&[u8]>),
    ) -> Result<Vec<TxnOp>, FenceError> {
        EntryHead::check_stored(head, value.is_some(), Some(mark))
            .map_err(|why| corrupt(domain, format!("a state not written: {why}")))?;
        let mut changes = vec![TxnOp::put(
            keys.store(domain, StoreKey::State),
            encode_state(mark, head, value),
            None,
        )];
        if self.layout_1 {
            changes
                .extend(StoreKey::LAYOUT_1.map(|key| TxnOp::delete(keys.store(domain, key), None)));
        }
        Ok(changes)
    }

    /// The state as a cache keeps it: without the value's bytes (decisions do not need them).
    pub(crate) fn without_value(&self) -> Stored {
        Stored {
            mark: self.mark,
            version: self.version,
            layout_1: self.layout_1,
            head: self.head,
            value: None,
            ops: self.ops.clone(),
            live_lease: self.live_lease,
            settings: self.settings,
        }
    }

    /// What fence-core's decisions need.
    pub(crate) fn current(&self) -> Current {
        Current::with_head(self.mark, self.head)
    }

    /// The snapshot a read returns.
    pub(crate) fn snapshot(self) -> Snapshot {
        let entry = match (self.head, self.value) {
            (Some(EntryHead::Value { token, revision }), Some(value)) => Entry::Value {
                value: value.into(),
                token,
                revision,
            },
            (Some(EntryHead::Tombstone { token, revision }), _) => {
                Entry::Tombstone { token, revision }
            }
            _ => Entry::Absent,
        };
        Snapshot::new(self.mark, entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_key_round_trips_and_refuses_what_fence_never_writes() {
        let t = |n| FencingToken::new(n).unwrap_or_else(|e| unreachable!("{e}"));
        let value = EntryHead::Value {
            token: t(4),
            revision: fence_core::Revision::new(2),
        };
        for (mark, head, bytes) in [
            (t(5), Some(value), Some(&b"a\nb\n\n"[..])),
            (t(5), Some(value), Some(&b""[..])),
            (t(1), None, None),
        ] {
            let encoded = encode_state(mark, head, bytes);
            let decoded = decode_state(encoded).unwrap_or_else(|e| unreachable!("{e}"));
            assert_eq!(decoded, (mark, head, bytes.map(<[u8]>::to_vec)));
        }
        assert_eq!(
            encode_state(t(5), Some(value), Some(b"v")),
            b"fence-store/2 5 value 4 2\nv"
        );
        for bad in [
            &b"fence-store/2 5 none"[..],
            b"fence-store/2 5\n",
            b"fence-store/2  none\n",
            b"fence-store/1 5 none\n",
            b"fence-store/2 05 none\n",
            b"fence-store/2 5 none\nx",
            b"fence-store/2 5 maybe 4 2\n",
            b"fence-store/2 \xff none\n",
        ] {
            assert!(decode_state(bad.to_vec()).is_err(), "{bad:?}");
        }
    }
}
