//! A domain's item: its attributes, how numbers and op records are encoded in them, and the
//! state Fence decides on, decoded failing closed on anything Fence did not write.
//!
//! ```text
//! pk     S  <namespace>/<escaped domain>        the table's partition key
//! mark   N  the high-water mark
//! ver    N  the store's version: raised by every write, claim and fenced transaction
//! entry  S  `value <token> <revision>` or `tombstone <token> <revision>`
//! val    B  the value's bytes (present with a `value` entry)
//! ops    L  remembered write op ids, one fence-core op line (S) each, oldest first
//! txops  L  remembered fenced-transaction op ids, `tx <token> <previous|-> <op id>` (S) each
//! ctr    N  the last token issued for the domain (issuer and leases alike)
//! owner  S  the lease's holder        ─┐
//! ltok   N  the lease's token          │ present while the lease is held
//! rvn    N  its record version number  │ (changed by every grant and renewal)
//! ttl    N  its duration, milliseconds ─┘
//! ```

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use fence_core::raw::pipeline::Current;
use fence_core::raw::{parse_count, EntryHead, OpMemory, OpRecord, StoredOp};
use fence_core::{Domain, FenceError, FencingToken, OpKind, OpOutcome, OperationId, Snapshot};

use crate::error::corrupt;

/// An item as the SDK returns it.
pub(crate) type RawItem = HashMap<String, AttributeValue>;

/// Attribute names (each sent through an expression attribute name: several are DynamoDB
/// reserved words).
pub(crate) mod attr {
    pub(crate) const PK: &str = "pk";
    pub(crate) const MARK: &str = "mark";
    pub(crate) const VER: &str = "ver";
    pub(crate) const ENTRY: &str = "entry";
    pub(crate) const VALUE: &str = "val";
    pub(crate) const OPS: &str = "ops";
    pub(crate) const TX_OPS: &str = "txops";
    pub(crate) const COUNTER: &str = "ctr";
    pub(crate) const OWNER: &str = "owner";
    pub(crate) const LEASE_TOKEN: &str = "ltok";
    pub(crate) const RVN: &str = "rvn";
    pub(crate) const TTL: &str = "ttl";
    pub(crate) const ALL: [&str; 13] = [
        PK,
        MARK,
        VER,
        ENTRY,
        VALUE,
        OPS,
        TX_OPS,
        COUNTER,
        OWNER,
        LEASE_TOKEN,
        RVN,
        TTL,
        "",
    ];
}

/// A number attribute: u64 in canonical decimal (DynamoDB numbers hold 38 digits exactly).
pub(crate) fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// A string attribute.
pub(crate) fn text(s: impl Into<String>) -> AttributeValue {
    AttributeValue::S(s.into())
}

/// A remembered fenced transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TxRecord {
    pub(crate) token: FencingToken,
    pub(crate) previous: Option<FencingToken>,
    pub(crate) op_id: OperationId,
}

impl TxRecord {
    pub(crate) fn to_line(&self) -> String {
        let previous = self
            .previous
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        format!("tx {} {previous} {}", self.token, self.op_id.escaped())
    }

    fn parse_line(line: &str) -> Result<TxRecord, String> {
        let shortened = || line.chars().take(60).collect::<String>();
        let ["tx", token, previous, op] = line.split(' ').collect::<Vec<_>>()[..] else {
            return Err(format!("malformed transaction line `{}`", shortened()));
        };
        let token_of = |s: &str| {
            s.parse::<FencingToken>()
                .map_err(|e| format!("transaction token `{s}`: {e}"))
        };
        let op_id = OperationId::from_escaped(op).ok_or_else(|| {
            format!(
                "transaction op id `{}` is not canonically escaped",
                shortened()
            )
        })?;
        Ok(TxRecord {
            token: token_of(token)?,
            previous: if previous == "-" {
                None
            } else {
                Some(token_of(previous)?)
            },
            op_id,
        })
    }
}

/// The lease recorded on a domain's item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaseRecord {
    pub(crate) owner: String,
    pub(crate) token: FencingToken,
    pub(crate) rvn: u64,
    pub(crate) ttl_ms: u64,
}

/// What DynamoDB holds for a domain.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stored {
    pub(crate) mark: Option<FencingToken>,
    /// The store's version (0: no store change yet): every write compares it.
    pub(crate) version: u64,
    pub(crate) head: Option<EntryHead>,
    pub(crate) value: Option<Vec<u8>>,
    pub(crate) ops: OpMemory,
    pub(crate) tx_ops: Vec<TxRecord>,
    /// The last token issued (issuer and leases).
    pub(crate) counter: Option<FencingToken>,
    pub(crate) lease: Option<LeaseRecord>,
}

impl Stored {
    /// Decodes the item (`None`: no item), failing closed on anything Fence did not write.
    pub(crate) fn decode(domain: &Domain, item: Option<&RawItem>) -> Result<Stored, FenceError> {
        let Some(item) = item else {
            return Ok(Stored::default());
        };
        let bad = |name: &str, why: &str| corrupt(domain, format!("attribute `{name}`: {why}"));
        for name in item.keys() {
            if !attr::ALL.contains(&name.as_str()) || name.is_empty() {
                return Err(corrupt(
                    domain,
                    format!(
                        "foreign attribute `{}` on the domain's item",
                        name.chars().take(60).collect::<String>()
                    ),
                ));
            }
        }
        let n = |name: &str| -> Result<Option<&str>, FenceError> {
            match item.get(name) {
                None => Ok(None),
                Some(AttributeValue::N(n)) => Ok(Some(n)),
                Some(_) => Err(bad(name, "not a number")),
            }
        };
        let token = |name: &str| -> Result<Option<FencingToken>, FenceError> {
            n(name)?
                .map(|n| {
                    n.parse::<FencingToken>()
                        .map_err(|e| bad(name, &format!("`{}`: {e}", short(n))))
                })
                .transpose()
        };
        let count = |name: &str| -> Result<Option<u64>, FenceError> {
            n(name)?
                .map(|n| {
                    parse_count(n)
                        .ok_or_else(|| bad(name, &format!("`{}` is not a count", short(n))))
                })
                .transpose()
        };
        let s = |name: &str| -> Result<Option<&str>, FenceError> {
            match item.get(name) {
                None => Ok(None),
                Some(AttributeValue::S(s)) => Ok(Some(s)),
                Some(_) => Err(bad(name, "not a string")),
            }
        };
        let lines = |name: &str| -> Result<Vec<&str>, FenceError> {
            match item.get(name) {
                None => Ok(Vec::new()),
                Some(AttributeValue::L(list)) => list
                    .iter()
                    .map(|v| match v {
                        AttributeValue::S(s) => Ok(s.as_str()),
                        _ => Err(bad(name, "a list element that is not a string")),
                    })
                    .collect(),
                Some(_) => Err(bad(name, "not a list")),
            }
        };
        let ops = lines(attr::OPS)?
            .into_iter()
            .map(|line| OpRecord::parse_line(line, OpKind::Write))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(attr::OPS, &e))?;
        let tx_ops = lines(attr::TX_OPS)?
            .into_iter()
            .map(TxRecord::parse_line)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(attr::TX_OPS, &e))?;
        let value = match item.get(attr::VALUE) {
            None => None,
            Some(AttributeValue::B(blob)) => Some(blob.as_ref().to_vec()),
            Some(_) => return Err(bad(attr::VALUE, "not binary")),
        };
        let lease = match (
            s(attr::OWNER)?,
            token(attr::LEASE_TOKEN)?,
            count(attr::RVN)?,
            count(attr::TTL)?,
        ) {
            (None, None, None, None) => None,
            (Some(owner), Some(token), Some(rvn), Some(ttl_ms)) => Some(LeaseRecord {
                owner: owner.to_owned(),
                token,
                rvn,
                ttl_ms,
            }),
            _ => {
                return Err(corrupt(
                    domain,
                    "a lease with some of owner, ltok, rvn and ttl missing",
                ))
            }
        };
        let stored = Stored {
            mark: token(attr::MARK)?,
            version: count(attr::VER)?.unwrap_or(0),
            head: s(attr::ENTRY)?
                .map(|e| EntryHead::parse(e).map_err(|why| bad(attr::ENTRY, &why)))
                .transpose()?,
            value,
            ops: OpMemory::from_records(ops),
            tx_ops,
            counter: token(attr::COUNTER)?,
            lease,
        };
        stored.check(domain)?;
        Ok(stored)
    }

    /// The attributes must agree with each other.
    fn check(&self, domain: &Domain) -> Result<(), FenceError> {
        let changed = self.version > 0;
        match self.mark {
            None if changed || self.head.is_some() || self.value.is_some() => {
                return Err(corrupt(domain, "store attributes without a mark"))
            }
            Some(_) if !changed => return Err(corrupt(domain, "a mark without a version")),
            _ => {}
        }
        if self.mark.is_none() {
            return Ok(());
        }
        EntryHead::check_stored(self.head, self.value.is_some(), self.mark)
            .map_err(|why| corrupt(domain, why))
    }

    /// The state as a cache keeps it: without the value's bytes.
    pub(crate) fn without_value(&self) -> Stored {
        Stored {
            value: None,
            ..self.clone()
        }
    }

    /// What fence-core's decisions need.
    pub(crate) fn current(&self) -> Current {
        Current::with_head(self.mark, self.head)
    }

    /// What the item remembers of `op_id`, as either kind of operation.
    pub(crate) fn stored_op(&self, op_id: &OperationId) -> Option<StoredOp> {
        if let Some(tx) = self.tx_ops.iter().find(|tx| &tx.op_id == op_id) {
            return Some(StoredOp::Transaction {
                previous: tx.previous,
            });
        }
        self.ops
            .iter()
            .find(|op| &op.op_id == op_id)
            .and_then(|op| match op.outcome {
                OpOutcome::Write { revision } => Some(StoredOp::Write {
                    revision,
                    previous: op.previous,
                }),
                _ => None,
            })
    }

    /// The snapshot a read returns (the item was checked when decoded).
    pub(crate) fn snapshot(self, domain: &Domain) -> Result<Snapshot, FenceError> {
        let entry = EntryHead::entry(self.head, self.value).map_err(|why| corrupt(domain, why))?;
        Ok(Snapshot::new(self.mark, entry))
    }
}

/// The op lines of `ops`, as the `ops` attribute holds them.
pub(crate) fn op_lines(ops: &OpMemory) -> AttributeValue {
    AttributeValue::L(ops.iter().map(|op| text(op.to_line())).collect())
}

/// The transaction lines of `records`, as the `txops` attribute holds them.
pub(crate) fn tx_lines(records: &[TxRecord]) -> AttributeValue {
    AttributeValue::L(records.iter().map(|r| text(r.to_line())).collect())
}

fn short(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d() -> Domain {
        Domain::new("orders").unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> RawItem {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn numbers_are_exact_u64_and_anything_else_is_corrupt() {
        for n in [1, (1 << 53) + 1, 1 << 63, u64::MAX] {
            let stored = Stored::decode(
                &d(),
                Some(&item(&[(attr::MARK, number(n)), (attr::VER, number(1))])),
            )
            .unwrap_or_else(|e| unreachable!("{e}"));
            assert_eq!(stored.mark.map(FencingToken::get), Some(n));
        }
        for bad in ["0", "18446744073709551616", "1.5", "-1", "1e3", "007"] {
            let decoded = Stored::decode(
                &d(),
                Some(&item(&[
                    (attr::MARK, AttributeValue::N(bad.into())),
                    (attr::VER, number(1)),
                ])),
            );
            assert!(
                matches!(decoded, Err(FenceError::CorruptState { .. })),
                "{bad}: {decoded:?}"
            );
        }
        let foreign = Stored::decode(&d(), Some(&item(&[("color", text("red"))])));
        assert!(
            matches!(foreign, Err(FenceError::CorruptState { .. })),
            "{foreign:?}"
        );
        let half_lease = Stored::decode(&d(), Some(&item(&[(attr::OWNER, text("a"))])));
        assert!(
            matches!(half_lease, Err(FenceError::CorruptState { .. })),
            "{half_lease:?}"
        );
    }

    #[test]
    fn transaction_lines_round_trip() {
        let record = TxRecord {
            token: FencingToken::new(u64::MAX).unwrap_or_else(|e| unreachable!("{e}")),
            previous: None,
            op_id: OperationId::new("pay 7/x").unwrap_or_else(|e| unreachable!("{e}")),
        };
        assert_eq!(TxRecord::parse_line(&record.to_line()), Ok(record));
        for bad in ["tx 1 - ", "tx 0 - a", "tx 1 2", "op 1 1 - a", "tx 1 - a%2"] {
            assert!(TxRecord::parse_line(bad).is_err(), "{bad}");
        }
    }
}
