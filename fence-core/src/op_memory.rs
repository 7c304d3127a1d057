//! The bounded memory of a domain's recent operations and its one text codec.
//!
//! Every adapter that stores operation ids next to the mark (the S3 envelope, the Kafka ledger,
//! the in-memory resource) keeps them in an [`OpMemory`] and writes each record as one line:
//!
//! ```text
//! op <token> <revision | records> <previous mark | -> <escaped op id>
//! ```
//!
//! The second field is the write's revision in a store and the batch's record count in a log:
//! the container says which ([`OpKind`]). Numbers are canonical decimals, the op id is escaped as
//! [`crate::Domain::escaped`] does; anything else fails to parse.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use crate::domain::{percent_encode, unescape};
use crate::{Domain, FenceError, FencingToken, InvalidInput, OperationId, Revision};

/// Which kind of operation an operation id named. Reusing one id for two kinds is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// A fenced write or delete.
    Write,
    /// A fenced log append.
    Append,
    /// A user's fenced script (Redis).
    Script,
    /// A fenced operation of a crate built on an adapter (such as an outbox transition).
    Extension,
    /// A user's fenced transaction (PostgreSQL).
    Transaction,
}

impl OpKind {
    /// The lowercase name used in messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::Append => "append",
            OpKind::Script => "fenced script",
            OpKind::Extension => "extension operation",
            OpKind::Transaction => "fenced transaction",
        }
    }

    /// The indefinite article of its name, for messages: "an" append, "a" write.
    pub const fn article(self) -> &'static str {
        match self {
            OpKind::Append | OpKind::Extension => "an",
            OpKind::Write | OpKind::Script | OpKind::Transaction => "a",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first outcome of a remembered operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpOutcome {
    /// A write or delete that produced this revision.
    Write {
        /// The revision the write produced.
        revision: Revision,
    },
    /// An append of this many records.
    Append {
        /// How many records the batch held.
        records: usize,
    },
}

impl OpOutcome {
    /// The kind of operation this outcome belongs to.
    pub const fn kind(self) -> OpKind {
        match self {
            OpOutcome::Write { .. } => OpKind::Write,
            OpOutcome::Append { .. } => OpKind::Append,
        }
    }

    fn count(self) -> u64 {
        match self {
            OpOutcome::Write { revision } => revision.get(),
            OpOutcome::Append { records } => u64::try_from(records).unwrap_or(u64::MAX),
        }
    }
}

/// One remembered operation: who (token), which (op id), and what it did first.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpRecord {
    /// The token the operation carried.
    pub token: FencingToken,
    /// Its operation id.
    pub op_id: OperationId,
    /// The domain's mark before it was applied.
    pub previous: Option<FencingToken>,
    /// What it did.
    pub outcome: OpOutcome,
}

impl OpRecord {
    /// A record.
    pub fn new(
        token: FencingToken,
        op_id: OperationId,
        previous: Option<FencingToken>,
        outcome: OpOutcome,
    ) -> Self {
        OpRecord {
            token,
            op_id,
            previous,
            outcome,
        }
    }

    /// The record as one line of text, without a line break.
    pub fn to_line(&self) -> String {
        let previous = self
            .previous
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        format!(
            "op {} {} {previous} {}",
            self.token,
            self.outcome.count(),
            percent_encode(self.op_id.as_str())
        )
    }

    /// Parses a line written by [`OpRecord::to_line`] for an operation of `kind`
    /// ([`OpKind::Write`] or [`OpKind::Append`]); the error says what is wrong.
    pub fn parse_line(line: &str, kind: OpKind) -> Result<OpRecord, String> {
        let shortened = || line.chars().take(60).collect::<String>();
        let ["op", token, count, previous, op] = line.split(' ').collect::<Vec<_>>()[..] else {
            return Err(format!("malformed operation line `{}`", shortened()));
        };
        let token_of = |s: &str| {
            s.parse::<FencingToken>()
                .map_err(|e| format!("operation token `{s}`: {e}"))
        };
        let count = crate::token::parse_count(count)
            .ok_or_else(|| format!("operation count `{count}` is not canonical"))?;
        let op_id = unescape(op)
            .and_then(|raw| OperationId::new(raw).ok())
            .filter(|id| percent_encode(id.as_str()) == op)
            .ok_or_else(|| format!("operation id `{}` is not canonically escaped", shortened()))?;
        let outcome = match kind {
            OpKind::Write => OpOutcome::Write {
                revision: Revision::new(count),
            },
            OpKind::Append => OpOutcome::Append {
                records: usize::try_from(count).map_err(|_| "record count overflows".to_owned())?,
            },
            other => return Err(format!("no line format for a {other}")),
        };
        Ok(OpRecord {
            token: token_of(token)?,
            op_id,
            previous: if previous == "-" {
                None
            } else {
                Some(token_of(previous)?)
            },
            outcome,
        })
    }
}

/// The most recent operations of one domain, oldest evicted first, found by (token, op id).
#[derive(Clone, Default)]
pub struct OpMemory {
    records: VecDeque<OpRecord>,
    /// (token, op id) → sequence number of the record; `records[0]` has sequence `evicted`.
    index: HashMap<(FencingToken, OperationId), u64>,
    evicted: u64,
}

impl OpMemory {
    /// An empty memory.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many operations are remembered.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &OpRecord> {
        self.records.iter()
    }

    /// The first outcome of (token, op id), if remembered. An op id remembered for another
    /// kind of operation is [`InvalidInput::OpIdReused`].
    pub fn find(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &OperationId,
        kind: OpKind,
    ) -> Result<Option<&OpRecord>, FenceError> {
        let Some(&sequence) = self.index.get(&(token, op_id.clone())) else {
            return Ok(None);
        };
        let position = usize::try_from(sequence - self.evicted).unwrap_or(usize::MAX);
        let Some(record) = self.records.get(position) else {
            return Ok(None);
        };
        if record.outcome.kind() != kind {
            return Err(InvalidInput::OpIdReused {
                domain: domain.clone(),
                op_id: op_id.clone(),
                first: record.outcome.kind(),
                now: kind,
            }
            .into());
        }
        Ok(Some(record))
    }

    /// Remembers `record`, keeping at most `capacity` records (0 remembers nothing).
    pub fn remember(&mut self, record: OpRecord, capacity: usize) {
        if capacity == 0 {
            return;
        }
        while self.records.len() >= capacity {
            self.evict_oldest();
        }
        let sequence = self.evicted + self.records.len() as u64;
        self.index
            .insert((record.token, record.op_id.clone()), sequence);
        self.records.push_back(record);
    }

    fn evict_oldest(&mut self) {
        if let Some(oldest) = self.records.pop_front() {
            let key = (oldest.token, oldest.op_id);
            // A key remembered twice (after eviction and re-application) points at its newest.
            if self.index.get(&key) == Some(&self.evicted) {
                self.index.remove(&key);
            }
            self.evicted += 1;
        }
    }

    /// Builds a memory from stored records, oldest first.
    pub fn from_records(records: impl IntoIterator<Item = OpRecord>) -> Self {
        let mut memory = OpMemory::new();
        for record in records {
            memory.remember(record, usize::MAX);
        }
        memory
    }
}

impl PartialEq for OpMemory {
    fn eq(&self, other: &Self) -> bool {
        self.records == other.records
    }
}

impl Eq for OpMemory {}

impl fmt::Debug for OpMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.records.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    fn record(token: u64, op: &str, revision: u64) -> OpRecord {
        OpRecord::new(
            t(token),
            OperationId::new(op).unwrap_or_else(|_| unreachable!()),
            Some(t(1)),
            OpOutcome::Write {
                revision: Revision::new(revision),
            },
        )
    }

    #[test]
    fn bounded_and_found_by_token_and_op_id() -> Result<(), FenceError> {
        let d = Domain::new("d")?;
        let mut memory = OpMemory::new();
        for (i, op) in ["a", "b", "c"].iter().enumerate() {
            memory.remember(record(2, op, i as u64 + 1), 2);
        }
        assert_eq!(memory.len(), 2);
        let a = OperationId::new("a")?;
        let c = OperationId::new("c")?;
        assert!(memory.find(&d, t(2), &a, OpKind::Write)?.is_none());
        assert!(memory.find(&d, t(3), &c, OpKind::Write)?.is_none());
        let found = memory.find(&d, t(2), &c, OpKind::Write)?;
        assert_eq!(found.map(|r| r.outcome.count()), Some(3));
        // Re-applied after eviction: the newest record answers, and survives the old one's eviction.
        memory.remember(record(2, "c", 9), 2);
        memory.remember(record(2, "d", 10), 2);
        let found = memory.find(&d, t(2), &c, OpKind::Write)?;
        assert_eq!(found.map(|r| r.outcome.count()), Some(9));
        Ok(())
    }

    #[test]
    fn lines_round_trip_and_garbage_is_refused() {
        let original = record(u64::MAX, "order-7/pay é", 7);
        let line = original.to_line();
        assert_eq!(line, "op 18446744073709551615 7 1 order-7%2Fpay%20%C3%A9");
        assert_eq!(OpRecord::parse_line(&line, OpKind::Write), Ok(original));
        for bad in [
            "op 1 07 - a",
            "op 1 +7 - a",
            "op 0 1 - a",
            "op 1 1 x a",
            "op 1 1 - a b",
            "op 1 1 -",
            "op 1 1 - a/b",
            "op 1 1 - %2x",
            "op 1 1 - %41",
            "op 1 1 - %0A",
            "opx 1 1 - a",
        ] {
            assert!(OpRecord::parse_line(bad, OpKind::Write).is_err(), "{bad}");
        }
    }
}
