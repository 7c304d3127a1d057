//! The fence ledger: one record per domain on a compacted topic, holding the domain's
//! high-water mark and its recent operation ids.
//!
//! ```text
//! FENCE-KAFKA/1
//! hwm 42
//! seq 1300                (record-key partitioning only: the domain's next record sequence)
//! op 42 100 41 batch-7    (token, records, previous mark or `-`, escaped op id), newest last
//! ```
//!
//! Only producers with the domain's transactional id write a domain's record, so after
//! `init_transactions` the record a holder reads stays the latest until its epoch is fenced.

use std::fmt::Write as _;

use fence_core::raw::{OpMemory, OpRecord};
use fence_core::{FencingToken, OpKind};

const MAGIC: &str = "FENCE-KAFKA/1";

/// A remembered operation id and its first outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LedgerState {
    pub(crate) hwm: Option<FencingToken>,
    /// The sequence number the domain's next data record gets (record-key partitioning: the
    /// domain's order across partitions); 0 when never used.
    pub(crate) seq: u64,
    pub(crate) ops: OpMemory,
}

impl LedgerState {
    pub(crate) fn encode(&self) -> String {
        let mut text = format!("{MAGIC}\n");
        if let Some(hwm) = self.hwm {
            let _ = writeln!(text, "hwm {hwm}");
        }
        if self.seq > 0 {
            let _ = writeln!(text, "seq {}", self.seq);
        }
        for op in self.ops.iter() {
            let _ = writeln!(text, "{}", op.to_line());
        }
        text
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let text =
            std::str::from_utf8(bytes).map_err(|_| "ledger record is not UTF-8".to_owned())?;
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err("ledger record has no FENCE-KAFKA/1 header".into());
        }
        let token = |s: &str| {
            s.parse::<FencingToken>()
                .map_err(|e| format!("ledger token `{s}`: {e}"))
        };
        let mut state = LedgerState::default();
        let mut ops = Vec::new();
        for line in lines {
            match line.split(' ').collect::<Vec<_>>()[..] {
                ["hwm", t] if state.hwm.is_none() && state.seq == 0 && ops.is_empty() => {
                    state.hwm = Some(token(t)?);
                }
                ["seq", n] if state.seq == 0 && ops.is_empty() => {
                    state.seq = fence_core::raw::parse_count(n)
                        .ok_or_else(|| format!("ledger sequence `{n}` is not canonical"))?;
                }
                ["op", ..] => ops.push(
                    OpRecord::parse_line(line, OpKind::Append)
                        .map_err(|why| format!("ledger {why}"))?,
                ),
                _ => {
                    return Err(format!(
                        "unknown ledger line `{}`",
                        line.chars().take(60).collect::<String>()
                    ))
                }
            }
        }
        state.ops = OpMemory::from_records(ops);
        Ok(state)
    }
}

/// A decoded `FENCE-KAFKA/1` fence-ledger record (the format is specified in FORMATS.md), for
/// tools that read the ledger topic: decoded with the same strict rules the fence reads with.
///
/// ```
/// let record = fence_kafka::LedgerRecord::decode(b"FENCE-KAFKA/1\nhwm 42\nop 42 100 41 batch-7\n")?;
/// assert_eq!(record.high_water_mark.map(|t| t.get()), Some(42));
/// assert_eq!(record.ops.iter().next().map(|op| op.op_id.as_str()), Some("batch-7"));
/// # Ok::<(), fence_kafka::LedgerDecodeError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LedgerRecord {
    /// The domain's high-water mark (`None` in a record that only created the domain's key).
    pub high_water_mark: Option<FencingToken>,
    /// The `fence-seq` the domain's next record gets, under record-key partitioning (`None`
    /// otherwise).
    pub next_seq: Option<u64>,
    /// The operation ids the domain remembers, oldest first.
    pub ops: OpMemory,
}

/// Why bytes are not a fence-ledger record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("damaged FENCE-KAFKA/1 ledger record: {reason}")]
pub struct LedgerDecodeError {
    /// What is wrong.
    pub reason: String,
}

impl LedgerRecord {
    /// Decodes a ledger record's value.
    pub fn decode(bytes: &[u8]) -> Result<Self, LedgerDecodeError> {
        let state = LedgerState::decode(bytes).map_err(|reason| LedgerDecodeError { reason })?;
        Ok(LedgerRecord {
            high_water_mark: state.hwm,
            next_seq: (state.seq > 0).then_some(state.seq),
            ops: state.ops,
        })
    }
}

/// A stable partition for a domain (FNV-1a), the same in every process and version.
pub(crate) fn partition_for(domain: &str, partitions: i32) -> i32 {
    (fnv1a_64(domain) % u64::from(partitions.max(1).unsigned_abs())) as i32
}

/// FNV-1a 64 of `text`'s bytes (FORMATS.md §1.8).
fn fnv1a_64(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_the_fnv1a_64_vectors_of_formats_md() {
        for (domain, hash) in [
            ("a", 0xaf63_dc4c_8601_ec8c),
            ("orders", 0x0012_5d92_50be_8b4c),
            ("customer-42", 0x1e1b_8c70_eb18_f59e),
            ("order/42", 0x6cbf_8986_9756_1972),
        ] {
            assert_eq!(fnv1a_64(domain), hash, "{domain}");
        }
    }

    #[test]
    fn partitions_match_the_fnv1a_64_vectors_of_formats_md() {
        // FORMATS.md §1.8: the same values a reader in another language must compute.
        for (domain, partition) in [("orders", 4), ("customer-42", 2), ("order/42", 10)] {
            assert_eq!(partition_for(domain, 12), partition, "{domain}");
        }
        assert_eq!(partition_for("anything", 1), 0);
    }

    #[test]
    fn round_trips_and_refuses_garbage() {
        let mut state = LedgerState {
            hwm: FencingToken::new(u64::MAX).ok(),
            seq: 1300,
            ops: OpMemory::new(),
        };
        for (op, records, previous) in [("a/b", 3, None), ("c", 1, Some(7)), ("d", 1, None)] {
            let op = fence_core::OperationId::new(op).unwrap_or_else(|_| unreachable!());
            let previous = previous.and_then(|p| FencingToken::new(p).ok());
            let outcome = fence_core::OpOutcome::Append { records };
            state
                .ops
                .remember(OpRecord::new(FencingToken::MAX, op, previous, outcome), 2);
        }
        assert_eq!(state.ops.len(), 2);
        assert_eq!(LedgerState::decode(state.encode().as_bytes()), Ok(state));
        for bad in [
            "",
            "hwm 3",
            "FENCE-KAFKA/1\nhwm 03",
            "FENCE-KAFKA/1\nhwm 3\nhwm 4",
            "FENCE-KAFKA/1\nowner x",
            "FENCE-KAFKA/1\nhwm 3\nseq 0",
            "FENCE-KAFKA/1\nhwm 3\nseq 07",
            "FENCE-KAFKA/1\nseq 7\nhwm 3",
        ] {
            assert!(LedgerState::decode(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn partitions_are_stable_and_in_range() {
        assert_eq!(partition_for("orders", 1), 0);
        let p = partition_for("customer-42", 12);
        assert!((0..12).contains(&p));
        assert_eq!(p, partition_for("customer-42", 12));
    }
}
