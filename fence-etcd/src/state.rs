//! A domain's store keys as read in one range request, and their text encodings.

use etcd_client::KeyValue;
use fence_core::raw::pipeline::Current;
use fence_core::raw::{EntryHead, OpMemory, OpRecord};
use fence_core::{Domain, Entry, FenceError, FencingToken, OpKind, Snapshot};

use crate::error::corrupt;
use crate::keys::StoreKey;
use crate::settings::Settings;

/// The remembered operations as the `ops` key's text: one op line each, newest last.
pub(crate) fn encode_ops(ops: &OpMemory) -> String {
    ops.iter().map(|op| op.to_line() + "\n").collect()
}

/// What etcd holds for a domain.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stored {
    pub(crate) mark: Option<FencingToken>,
    /// The mark key's `mod_revision` (0: absent): every change of the domain rewrites the
    /// mark key, so a txn comparing it changes nothing if anything changed since the read.
    pub(crate) version: i64,
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
        let mut seen = false;
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
            if key == StoreKey::Mark {
                stored.version = kv.mod_revision();
            }
            let (_, value) = kv.into_key_value();
            let text = |what: &str| {
                String::from_utf8(value.clone())
                    .map_err(|_| corrupt(domain, format!("the {what} key is not UTF-8")))
            };
            match key {
                StoreKey::Mark => {
                    let text = text("mark")?;
                    stored.mark = Some(text.parse().map_err(|e| {
                        corrupt(
                            domain,
                            format!("mark `{}`: {e}", text.chars().take(40).collect::<String>()),
                        )
                    })?);
                }
                StoreKey::Entry => {
                    stored.head =
                        Some(EntryHead::parse(&text("entry")?).map_err(|e| corrupt(domain, e))?)
                }
                StoreKey::Value => stored.value = Some(value),
                StoreKey::Ops => {
                    let records = text("ops")?
                        .lines()
                        .map(|line| OpRecord::parse_line(line, OpKind::Write))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| corrupt(domain, e))?;
                    stored.ops = OpMemory::from_records(records);
                }
            }
        }
        stored.check(domain, seen)?;
        Ok(stored)
    }

    /// The keys must agree with each other.
    fn check(&self, domain: &Domain, seen: bool) -> Result<(), FenceError> {
        let Some(mark) = self.mark else {
            return if seen {
                Err(corrupt(domain, "store keys without a mark"))
            } else {
                Ok(())
            };
        };
        EntryHead::check_stored(self.head, self.value.is_some(), Some(mark))
            .map_err(|why| corrupt(domain, why))
    }

    /// The state as a cache keeps it: without the value's bytes (decisions do not need them).
    pub(crate) fn without_value(&self) -> Stored {
        Stored {
            mark: self.mark,
            version: self.version,
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
