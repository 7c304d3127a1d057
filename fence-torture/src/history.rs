//! What a torture run records: every operation a worker invoked, when it was invoked and when it
//! completed (microseconds since the run began), and what the resource answered.

use std::fmt;

/// What a worker asked of the resource.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// A put of the unique value `value`, or a delete when `value` is `None`.
    Write {
        /// The fencing token the write carried.
        token: u64,
        /// The value's unique id (`None`: a delete).
        value: Option<u64>,
        /// The operation id the write carried (retries of one operation share it).
        op_id: Option<String>,
    },
    /// A claim of `token`.
    Claim {
        /// The claimed token.
        token: u64,
    },
    /// An append of one batch of records, each value a unique id, committed together or not
    /// at all (a log).
    Append {
        /// The fencing token the batch carried.
        token: u64,
        /// The records' unique ids, in batch order.
        values: Vec<u64>,
        /// The operation id the batch carried (retries of one append share it).
        op_id: Option<String>,
    },
    /// A read of the mark and the entry (on a log: the mark).
    Read,
}

impl Op {
    /// The token the operation carried (`None`: a read).
    pub fn token(&self) -> Option<u64> {
        match self {
            Op::Write { token, .. } | Op::Claim { token } | Op::Append { token, .. } => {
                Some(*token)
            }
            Op::Read => None,
        }
    }
}

/// A domain's entry as a read reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SeenEntry {
    /// Nothing written yet.
    Absent,
    /// The value with this unique id, written by `token` at `revision`.
    Value {
        /// The value's unique id.
        value: u64,
        /// The writer's token.
        token: u64,
        /// The entry's revision.
        revision: u64,
    },
    /// A tombstone left by `token` at `revision`.
    Tombstone {
        /// The deleter's token.
        token: u64,
        /// The entry's revision.
        revision: u64,
    },
}

impl SeenEntry {
    /// The entry's revision (0 when absent).
    pub fn revision(&self) -> u64 {
        match self {
            SeenEntry::Absent => 0,
            SeenEntry::Value { revision, .. } | SeenEntry::Tombstone { revision, .. } => *revision,
        }
    }
}

/// What the resource answered.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// A write applied now, at `revision`, over the mark `previous`.
    Written {
        /// The entry's revision after the write.
        revision: u64,
        /// The mark just before it.
        previous: Option<u64>,
    },
    /// A retry of an operation id already applied: the first attempt's outcome.
    Duplicate {
        /// The revision the first attempt produced.
        revision: u64,
        /// The mark just before the first attempt.
        previous: Option<u64>,
    },
    /// A claim raised the mark over `previous`.
    Claimed {
        /// The mark before it.
        previous: Option<u64>,
    },
    /// A batch committed over the mark `previous` (`duplicate`: a retry of an operation id
    /// already committed, answered with the first attempt's outcome; nothing appended again).
    Appended {
        /// The mark just before the (first) commit.
        previous: Option<u64>,
        /// A replay of an earlier commit.
        duplicate: bool,
    },
    /// Refused as stale: the resource had accepted `current`.
    Fenced {
        /// The mark the resource reported.
        current: u64,
    },
    /// A read's answer.
    Read {
        /// The mark.
        mark: Option<u64>,
        /// The entry.
        entry: SeenEntry,
    },
    /// Sent, outcome unknown (timeout, cut connection): it may or may not have applied.
    Ambiguous,
    /// Failed before it could apply (refused connection, unavailable server): it did not apply.
    Failed(String),
}

/// One recorded operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Which worker.
    pub worker: usize,
    /// The window of the run it belongs to (every window starts with no operation in flight).
    pub window: u32,
    /// What it asked.
    pub op: Op,
    /// When it was invoked (µs since the run began).
    pub invoked: u64,
    /// When its answer arrived (µs since the run began).
    pub completed: u64,
    /// The answer.
    pub outcome: Outcome,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |t: Option<u64>| t.map_or("-".to_owned(), |t| t.to_string());
        write!(
            f,
            "[{:>10}..{:>10} µs] w{} ",
            self.invoked, self.completed, self.worker
        )?;
        match &self.op {
            Op::Write {
                token,
                value: Some(value),
                ..
            } => write!(f, "put v{value} t{token}")?,
            Op::Write {
                token, value: None, ..
            } => write!(f, "delete t{token}")?,
            Op::Claim { token } => write!(f, "claim t{token}")?,
            Op::Append { token, values, .. } => write!(f, "append {values:?} t{token}")?,
            Op::Read => write!(f, "read")?,
        }
        if let Op::Write {
            op_id: Some(op), ..
        }
        | Op::Append {
            op_id: Some(op), ..
        } = &self.op
        {
            write!(f, " op {op}")?;
        }
        write!(f, " -> ")?;
        match &self.outcome {
            Outcome::Written { revision, previous } => {
                write!(f, "written r{revision} over {}", opt(*previous))
            }
            Outcome::Duplicate { revision, previous } => {
                write!(f, "duplicate of r{revision} over {}", opt(*previous))
            }
            Outcome::Claimed { previous } => write!(f, "claimed over {}", opt(*previous)),
            Outcome::Appended {
                previous,
                duplicate,
            } => write!(
                f,
                "{} over {}",
                if *duplicate {
                    "duplicate of a commit"
                } else {
                    "committed"
                },
                opt(*previous)
            ),
            Outcome::Fenced { current } => write!(f, "fenced by {current}"),
            Outcome::Read { mark, entry } => write!(f, "mark {} entry {entry:?}", opt(*mark)),
            Outcome::Ambiguous => write!(f, "ambiguous"),
            Outcome::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

/// Everything one domain saw in a run, plus its state read after the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    /// The events, in the order they were recorded.
    pub events: Vec<Event>,
    /// The mark and entry read after every worker stopped and every ambiguity was resolved.
    pub final_state: Option<(Option<u64>, SeenEntry)>,
    /// On a log: its committed records as a read_committed reader saw them after the run, in
    /// log order (`None`: a register's run, or the final read failed).
    pub final_log: Option<Vec<LoggedRecord>>,
    /// The store may refuse a stale token from a client-side cache (fence-s3 does, at no
    /// request: DESIGN.md §3.4 allows a cache to prove `Fenced`), so a refusal's `current` is a
    /// mark it accepted, at most the present one, not necessarily the present one.
    pub refusals_from_cache: bool,
}

/// One committed record of a log, as the final read saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedRecord {
    /// The token its batch carried.
    pub token: u64,
    /// Its unique id (`u64::MAX`: a record no worker wrote).
    pub value: u64,
}

impl History {
    /// The events whose intervals overlap `[from, to]`, in invocation order: the window that
    /// shows a violation.
    pub fn window(&self, from: u64, to: u64) -> Vec<&Event> {
        let mut events: Vec<&Event> = self
            .events
            .iter()
            .filter(|e| e.invoked <= to && e.completed >= from)
            .collect();
        events.sort_by_key(|e| e.invoked);
        events
    }
}
