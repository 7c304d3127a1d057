//! What a fenced operation reports when it succeeds.

use std::fmt;

use bytes::Bytes;

use crate::{FencingToken, OperationId, Record, Revision};

/// A write or delete the resource accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Accepted {
    /// The token the write carried (now the domain's high-water mark).
    pub token: FencingToken,
    /// The domain's revision after the write.
    pub revision: Revision,
    /// The high-water mark just before the write (`None`: the domain was fresh).
    pub previous_high_water_mark: Option<FencingToken>,
    /// Replicas that acknowledged the write, where the backend was asked to wait for them.
    pub replicas_acknowledged: Option<u32>,
}

impl Accepted {
    /// An accepted write.
    pub fn new(
        token: FencingToken,
        revision: Revision,
        previous_high_water_mark: Option<FencingToken>,
    ) -> Self {
        Accepted {
            token,
            revision,
            previous_high_water_mark,
            replicas_acknowledged: None,
        }
    }

    /// Records how many replicas acknowledged the write.
    pub fn with_replicas_acknowledged(mut self, replicas: u32) -> Self {
        self.replicas_acknowledged = Some(replicas);
        self
    }
}

/// The outcome of a write or delete that did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteOutcome {
    /// Applied now.
    Accepted(Accepted),
    /// A retry of an operation id already applied: nothing was applied again; this is the first
    /// outcome.
    Duplicate(Accepted),
}

impl WriteOutcome {
    /// The accepted write, whether applied now or by the first attempt.
    pub fn accepted(&self) -> &Accepted {
        match self {
            WriteOutcome::Accepted(accepted) | WriteOutcome::Duplicate(accepted) => accepted,
        }
    }

    /// True for a replay of an earlier operation.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, WriteOutcome::Duplicate(_))
    }

    /// The metric label: `accepted` or `duplicate`.
    pub fn outcome_label(&self) -> &'static str {
        match self {
            WriteOutcome::Accepted(_) => "accepted",
            WriteOutcome::Duplicate(_) => "duplicate",
        }
    }
}

/// A claim the resource accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claimed {
    /// The claimed token (now the domain's high-water mark).
    pub token: FencingToken,
    /// The high-water mark before the claim.
    pub previous_high_water_mark: Option<FencingToken>,
}

impl Claimed {
    /// An accepted claim.
    pub fn new(token: FencingToken, previous_high_water_mark: Option<FencingToken>) -> Self {
        Claimed {
            token,
            previous_high_water_mark,
        }
    }
}

/// A domain's stored state.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Entry {
    /// Nothing was ever written (a claim alone leaves the entry absent).
    Absent,
    /// A live value.
    Value {
        /// The payload.
        value: Bytes,
        /// The token that wrote it.
        token: FencingToken,
        /// Its revision.
        revision: Revision,
    },
    /// Deleted: the tombstone keeps the token that deleted it.
    Tombstone {
        /// The token that deleted the value.
        token: FencingToken,
        /// The tombstone's revision.
        revision: Revision,
    },
}

impl Entry {
    /// The entry with its writer token lowered to `mark` if above it (a re-base).
    pub fn capped_at(self, mark: FencingToken) -> Entry {
        match self {
            Entry::Value {
                value,
                token,
                revision,
            } => Entry::Value {
                value,
                token: token.min(mark),
                revision,
            },
            Entry::Tombstone { token, revision } => Entry::Tombstone {
                token: token.min(mark),
                revision,
            },
            Entry::Absent => Entry::Absent,
        }
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Absent => f.write_str("Absent"),
            Entry::Value {
                value,
                token,
                revision,
            } => f
                .debug_struct("Value")
                .field("value_bytes", &value.len())
                .field("token", token)
                .field("revision", revision)
                .finish(),
            Entry::Tombstone { token, revision } => f
                .debug_struct("Tombstone")
                .field("token", token)
                .field("revision", revision)
                .finish(),
        }
    }
}

/// What [`crate::FencedStore::read`] returns: the entry and the domain's high-water mark.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The greatest token accepted for the domain (writes and claims).
    pub high_water_mark: Option<FencingToken>,
    /// The stored entry.
    pub entry: Entry,
}

impl Snapshot {
    /// A snapshot.
    pub fn new(high_water_mark: Option<FencingToken>, entry: Entry) -> Self {
        Snapshot {
            high_water_mark,
            entry,
        }
    }

    /// The live value, if any.
    pub fn value(&self) -> Option<&Bytes> {
        match &self.entry {
            Entry::Value { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The token that wrote the live value or the tombstone.
    pub fn written_by(&self) -> Option<FencingToken> {
        match self.entry {
            Entry::Value { token, .. } | Entry::Tombstone { token, .. } => Some(token),
            Entry::Absent => None,
        }
    }

    /// The revision of the value or tombstone.
    pub fn revision(&self) -> Option<Revision> {
        match self.entry {
            Entry::Value { revision, .. } | Entry::Tombstone { revision, .. } => Some(revision),
            Entry::Absent => None,
        }
    }
}

/// A log append the resource committed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Appended {
    /// The token the batch carried.
    pub token: FencingToken,
    /// How many records were committed.
    pub records: usize,
    /// The high-water mark before the append.
    pub previous_high_water_mark: Option<FencingToken>,
}

impl Appended {
    /// A committed append.
    pub fn new(
        token: FencingToken,
        records: usize,
        previous_high_water_mark: Option<FencingToken>,
    ) -> Self {
        Appended {
            token,
            records,
            previous_high_water_mark,
        }
    }
}

/// The outcome of an append that did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppendOutcome {
    /// Committed now.
    Appended(Appended),
    /// A retry of an operation id already committed: nothing was appended again.
    Duplicate(Appended),
}

impl AppendOutcome {
    /// The committed append, whether now or by the first attempt.
    pub fn appended(&self) -> &Appended {
        match self {
            AppendOutcome::Appended(appended) | AppendOutcome::Duplicate(appended) => appended,
        }
    }

    /// True for a replay of an earlier append.
    pub fn is_duplicate(&self) -> bool {
        matches!(self, AppendOutcome::Duplicate(_))
    }

    /// The metric label: `accepted` or `duplicate`.
    pub fn outcome_label(&self) -> &'static str {
        match self {
            AppendOutcome::Appended(_) => "accepted",
            AppendOutcome::Duplicate(_) => "duplicate",
        }
    }
}

/// A committed log record as a read_committed consumer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogEntry {
    /// The token the record's batch carried.
    pub token: FencingToken,
    /// The batch's operation id, if any.
    pub op_id: Option<OperationId>,
    /// The record.
    pub record: Record,
}

impl LogEntry {
    /// A committed record.
    pub fn new(token: FencingToken, op_id: Option<OperationId>, record: Record) -> Self {
        LogEntry {
            token,
            op_id,
            record,
        }
    }
}
