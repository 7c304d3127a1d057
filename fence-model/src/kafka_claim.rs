//! The Kafka ledger claim (fence-kafka's `claim.rs` and `append.rs`; DESIGN §6 and §13).
//!
//! Kafka fences producers by epoch per `transactional.id`, and `init_transactions` grants the
//! epoch to whoever initialises *last*, not to the highest lease token. Fence gives each domain
//! one transactional id and makes each holder claim through a ledger: it initialises its
//! producer (which aborts the open transaction of an older producer, or completes one already
//! preparing to commit), reads the committed ledger with read_committed, decides with
//! fence-core's [`pipeline::decide_claim`] / [`pipeline::decide_append`], and commits the raised
//! mark (and, for an append, its records) in one transaction, which the broker refuses if
//! another holder initialised since. A claim retried after a lost transaction decides on the
//! ledger before it initialises again, so a refused holder stops disturbing the owner.
//!
//! **Modelled**: the broker's epoch, its one open transaction (ongoing or preparing to commit),
//! the transaction timeout (an abort that bumps the epoch), the ledger and data logs as a
//! read_committed reader sees them; holders that claim, append, retry within their attempts,
//! pause at any step (every interleaving) and crash at any step. **Not modelled**: several
//! partitions and transactional ids, the broker's own crashes (the real-server tests kill it),
//! a commit refused although applied (`Committed::DespiteRefusal`, answered like a success),
//! the randomised pause between attempts (holders that keep aborting each other's
//! transactions exhaust their attempts here, which the pause makes unlikely on a real broker),
//! token bounds (`max_step`, issued-only: fence-kafka then reads the ledger before its first
//! initialisation too) and Strict appends, which read the ledger on every append.

use std::fmt;

use fence_core::raw::pipeline::{self, ClaimDecision, Decision};
use fence_core::raw::{OpMemory, TokenBounds};
use fence_core::{AppendRequest, Domain, FencingToken, Record};
use stateright::{Model, Property};

/// Which protocol the holders run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Variant {
    /// fence-kafka's: initialise, then read the ledger and decide, then commit.
    Fence,
    /// Broken: read the ledger and decide *before* initialising, never after it
    /// (check-then-write; a retry reads and decides again, still before initialising). The
    /// checker must find a lower mark committed after a higher one.
    DecideBeforeInit,
    /// Broken: no ledger decision at all, only producer epochs (the last initialiser wins).
    EpochsOnly,
}

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct KafkaClaim {
    /// The holders' tokens, distinct (their order is the order they start in).
    pub tokens: Vec<u64>,
    /// Appends each holder makes once it owns the domain.
    pub appends: u8,
    /// Transaction attempts per claim or append (fence-kafka: `aborted_retries + 1`).
    pub attempts: u8,
    /// Holders that may crash (each at any step).
    pub crashes: u8,
    /// Transaction timeouts the broker may apply (each aborts the ongoing transaction and
    /// bumps the epoch).
    pub timeouts: u8,
    /// The protocol.
    pub variant: Variant,
    /// Whether the broker's transaction timeout aborts the open transaction of a holder that
    /// crashed (it does: `transaction.timeout.ms`); off, a crashed holder's transaction holds
    /// back every read_committed reader for good.
    pub abandoned_transactions_expire: bool,
}

impl KafkaClaim {
    /// The bounds of `profile`, running `variant`.
    pub fn new(profile: crate::Profile, variant: Variant) -> Self {
        match profile {
            crate::Profile::Ci => KafkaClaim {
                tokens: vec![1, 3, 2],
                appends: 1,
                attempts: 3,
                crashes: 1,
                timeouts: 1,
                variant,
                abandoned_transactions_expire: true,
            },
            _ => KafkaClaim {
                tokens: vec![1, 3, 2],
                appends: 1,
                attempts: 4,
                crashes: 2,
                timeouts: 2,
                variant,
                abandoned_transactions_expire: true,
            },
        }
    }
}

impl fmt::Display for KafkaClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kafka claim ({:?}): holders {:?}, {} append(s) each, {} attempts, {} crash(es), {} timeout(s)",
            self.variant, self.tokens, self.appends, self.attempts, self.crashes, self.timeouts
        )
    }
}

/// What a holder's transaction is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Raising the mark to the holder's token.
    Claim,
    /// Appending a record under the holder's token (the ledger's mark goes with it).
    Append,
}

/// Where a holder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// About to initialise its producer for `purpose` (attempt `attempt`, from 0).
    Init {
        /// What the transaction is for.
        purpose: Purpose,
        /// The attempt, from 0.
        attempt: u8,
    },
    /// Its claim's transaction failed: it reads the ledger and decides before initialising
    /// again.
    Recheck {
        /// The attempt, from 0.
        attempt: u8,
    },
    /// Reads the committed ledger and decides.
    Read {
        /// What the transaction is for.
        purpose: Purpose,
        /// The attempt, from 0.
        attempt: u8,
    },
    /// Decided: begins a transaction and produces its records.
    Produce {
        /// What the transaction is for.
        purpose: Purpose,
        /// The attempt, from 0.
        attempt: u8,
    },
    /// Produced: asks the broker to commit (`EndTxn`).
    EndTxn {
        /// What the transaction is for.
        purpose: Purpose,
        /// The attempt, from 0.
        attempt: u8,
    },
    /// The broker accepted the commit; it returns once the markers are written.
    Preparing {
        /// What the transaction is for.
        purpose: Purpose,
    },
    /// Owns the domain: its claim was acknowledged.
    Owner,
    /// Refused by the decision: a higher mark is committed.
    Refused,
    /// Ran out of attempts, every one aborted by another holder's initialisation.
    Contended,
    /// Stopped at some step, never to run again (its open transaction stays on the broker).
    Crashed,
}

/// One holder: its token, where it is, its producer's epoch, the mark it last read and the
/// appends it has yet to make.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    token: u64,
    phase: Phase,
    epoch: Option<u8>,
    mark: Option<u64>,
    appends: u8,
}

impl Holder {
    fn done(&self) -> bool {
        match self.phase {
            Phase::Owner => self.appends == 0,
            Phase::Refused | Phase::Contended | Phase::Crashed => true,
            _ => false,
        }
    }
}

/// The broker's open transaction on the domain's transactional id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Txn {
    holder: usize,
    epoch: u8,
    /// `PrepareCommit` is written: the transaction commits whatever happens next.
    preparing: bool,
    /// The ledger mark and (for an append) the data record's token it carries.
    mark: u64,
    data: Option<u64>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    epoch: u8,
    txn: Option<Txn>,
    /// The ledger's committed marks, in log order.
    ledger: Vec<u64>,
    /// The data log's committed records (their tokens), in log order.
    data: Vec<u64>,
    holders: Vec<Holder>,
    /// The highest token whose claim was acknowledged to its holder.
    acknowledged: u64,
    /// A record below an acknowledged claim became visible after the acknowledgement.
    stale_visible: bool,
    crashes: u8,
    timeouts: u8,
}

/// A step of a holder (by index) or of the broker.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The holder initialises its producer (`init_transactions`).
    Init(usize),
    /// The holder reads the ledger and decides before initialising again (a claim's retry).
    Recheck(usize),
    /// The holder reads the committed ledger and decides.
    Read(usize),
    /// The holder begins a transaction and produces its records.
    Produce(usize),
    /// The holder asks the broker to commit.
    EndTxn(usize),
    /// The broker writes the markers of the transaction preparing to commit.
    Markers,
    /// The holder learns that its commit completed.
    Committed(usize),
    /// The holder starts an append with the producer and the mark it holds.
    Append(usize),
    /// The holder crashes.
    Crash(usize),
    /// The broker's transaction timeout aborts the ongoing transaction (and bumps the epoch).
    Timeout,
}

fn domain() -> Domain {
    Domain::new("orders/partition-7").unwrap_or_else(|_| unreachable!("a valid domain"))
}

fn token(value: u64) -> FencingToken {
    FencingToken::new(value).unwrap_or(FencingToken::MAX)
}

/// fence-core's claim decision on the mark read: `Some(true)` to raise the mark, `Some(false)`
/// when the holder's token is the mark already, `None` when refused.
fn claim_decision(read: Option<u64>, holder: u64) -> Option<bool> {
    match pipeline::decide_claim(&domain(), read.map(token), token(holder), TokenBounds::OPEN) {
        Ok(ClaimDecision::Raise(_)) => Some(true),
        Ok(_) => Some(false),
        Err(_) => None,
    }
}

/// fence-core's append decision on the mark read.
fn append_admitted(read: Option<u64>, holder: u64) -> bool {
    let request = AppendRequest::new(domain(), token(holder), vec![Record::new("event")]);
    matches!(
        pipeline::decide_append(
            &request,
            read.map(token),
            &OpMemory::new(),
            TokenBounds::OPEN
        ),
        Ok(Decision::Apply { .. })
    )
}

impl State {
    /// The mark a read of the ledger finds: its last committed record (the ledger is
    /// compacted by domain: the latest record is the domain's state).
    fn committed_mark(&self) -> Option<u64> {
        self.ledger.last().copied()
    }

    /// Makes the open transaction's records visible (its markers are written).
    fn write_markers(&mut self) {
        if let Some(txn) = self.txn.take() {
            self.ledger.push(txn.mark);
            if let Some(record) = txn.data {
                if record < self.acknowledged {
                    self.stale_visible = true;
                }
                self.data.push(record);
            }
        }
    }

    /// A transaction that failed: the holder tries again while it has attempts.
    fn retry(&mut self, model: &KafkaClaim, holder: usize, purpose: Purpose, attempt: u8) {
        let attempt = attempt + 1;
        self.holders[holder].phase = if attempt >= model.attempts {
            Phase::Contended
        } else {
            match (purpose, model.variant) {
                (_, Variant::DecideBeforeInit) => Phase::Read { purpose, attempt },
                (Purpose::Claim, Variant::Fence) => Phase::Recheck { attempt },
                _ => Phase::Init { purpose, attempt },
            }
        };
    }

    /// Whether the holder's own transaction is the open one, still ongoing.
    fn ongoing_of(&self, holder: usize) -> bool {
        self.txn.as_ref().is_some_and(|t| {
            t.holder == holder && !t.preparing && Some(t.epoch) == self.holders[holder].epoch
        })
    }

    fn terminal(&self) -> bool {
        self.txn.is_none() && self.holders.iter().all(Holder::done)
    }
}

impl Model for KafkaClaim {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let first = match self.variant {
            // Check-then-write reads the ledger before it initialises.
            Variant::DecideBeforeInit => Phase::Read {
                purpose: Purpose::Claim,
                attempt: 0,
            },
            _ => Phase::Init {
                purpose: Purpose::Claim,
                attempt: 0,
            },
        };
        vec![State {
            epoch: 0,
            txn: None,
            ledger: Vec::new(),
            data: Vec::new(),
            holders: self
                .tokens
                .iter()
                .map(|&token| Holder {
                    token,
                    phase: first,
                    epoch: None,
                    mark: None,
                    appends: self.appends,
                })
                .collect(),
            acknowledged: 0,
            stale_visible: false,
            crashes: 0,
            timeouts: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // A read_committed reader cannot read past an undecided transaction: reads wait.
        let readable = state.txn.is_none();
        for (i, holder) in state.holders.iter().enumerate() {
            match holder.phase {
                Phase::Init { .. } => actions.push(Action::Init(i)),
                Phase::Recheck { .. } if readable => actions.push(Action::Recheck(i)),
                Phase::Read { .. } if readable => actions.push(Action::Read(i)),
                Phase::Produce { .. } => actions.push(Action::Produce(i)),
                Phase::EndTxn { .. } => actions.push(Action::EndTxn(i)),
                Phase::Preparing { .. } if state.txn.as_ref().is_none_or(|t| t.holder != i) => {
                    actions.push(Action::Committed(i));
                }
                Phase::Owner if holder.appends > 0 => actions.push(Action::Append(i)),
                _ => {}
            }
            if !holder.done() && state.crashes < self.crashes {
                actions.push(Action::Crash(i));
            }
        }
        match &state.txn {
            Some(txn) if txn.preparing => actions.push(Action::Markers),
            // The timeout always fires for a crashed holder's transaction; otherwise within
            // the budget.
            Some(txn)
                if state.timeouts < self.timeouts
                    || (self.abandoned_transactions_expire
                        && state.holders[txn.holder].phase == Phase::Crashed) =>
            {
                actions.push(Action::Timeout)
            }
            _ => {}
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Init(i) => {
                let Phase::Init { purpose, attempt } = state.holders[i].phase else {
                    return None;
                };
                // init_transactions: a transaction preparing to commit completes first; an
                // ongoing one is aborted; the epoch is bumped.
                if state.txn.as_ref().is_some_and(|t| t.preparing) {
                    state.write_markers();
                }
                state.txn = None;
                state.epoch += 1;
                let holder = &mut state.holders[i];
                holder.epoch = Some(state.epoch);
                holder.phase = match self.variant {
                    Variant::Fence => Phase::Read { purpose, attempt },
                    // Decided already (check-then-write), or never (epochs only).
                    _ => Phase::Produce { purpose, attempt },
                };
            }
            Action::Recheck(i) => {
                let Phase::Recheck { attempt } = state.holders[i].phase else {
                    return None;
                };
                let read = state.committed_mark();
                let holder = &mut state.holders[i];
                holder.mark = read;
                holder.phase = match claim_decision(read, holder.token) {
                    None => Phase::Refused,
                    Some(_) => Phase::Init {
                        purpose: Purpose::Claim,
                        attempt,
                    },
                };
            }
            Action::Read(i) => {
                let Phase::Read { purpose, attempt } = state.holders[i].phase else {
                    return None;
                };
                let read = state.committed_mark();
                let holder = &mut state.holders[i];
                holder.mark = read;
                let decision = match purpose {
                    Purpose::Claim => claim_decision(read, holder.token),
                    Purpose::Append => append_admitted(read, holder.token).then_some(true),
                };
                holder.phase = match (decision, self.variant) {
                    (None, _) => Phase::Refused,
                    // Claiming the mark it holds already: acknowledged, nothing to commit.
                    (Some(false), _) => {
                        state.acknowledged = state.acknowledged.max(holder.token);
                        Phase::Owner
                    }
                    (Some(true), Variant::DecideBeforeInit) => Phase::Init { purpose, attempt },
                    (Some(true), _) => Phase::Produce { purpose, attempt },
                };
            }
            Action::Produce(i) => {
                let Phase::Produce { purpose, attempt } = state.holders[i].phase else {
                    return None;
                };
                let holder = &state.holders[i];
                // Another holder initialised since (or a timeout bumped the epoch): the
                // producer is fenced.
                if holder.epoch != Some(state.epoch) {
                    state.retry(self, i, purpose, attempt);
                    return Some(state);
                }
                state.txn = Some(Txn {
                    holder: i,
                    epoch: state.epoch,
                    preparing: false,
                    mark: holder.token,
                    data: (purpose == Purpose::Append).then_some(holder.token),
                });
                state.holders[i].phase = Phase::EndTxn { purpose, attempt };
            }
            Action::EndTxn(i) => {
                let Phase::EndTxn { purpose, attempt } = state.holders[i].phase else {
                    return None;
                };
                if !state.ongoing_of(i) {
                    // Aborted by another holder's initialisation or by the timeout.
                    state.retry(self, i, purpose, attempt);
                    return Some(state);
                }
                if let Some(txn) = state.txn.as_mut() {
                    txn.preparing = true;
                }
                state.holders[i].phase = Phase::Preparing { purpose };
            }
            Action::Markers => state.write_markers(),
            Action::Committed(i) => {
                let Phase::Preparing { purpose } = state.holders[i].phase else {
                    return None;
                };
                let holder = &mut state.holders[i];
                holder.mark = Some(holder.token);
                holder.phase = Phase::Owner;
                if purpose == Purpose::Claim {
                    state.acknowledged = state.acknowledged.max(holder.token);
                }
            }
            Action::Append(i) => {
                let holder = &mut state.holders[i];
                if holder.phase != Phase::Owner || holder.appends == 0 {
                    return None;
                }
                holder.appends -= 1;
                // With the producer it holds, decided on the mark it holds.
                let admitted = self.variant == Variant::EpochsOnly
                    || append_admitted(holder.mark, holder.token);
                holder.phase = if admitted {
                    Phase::Produce {
                        purpose: Purpose::Append,
                        attempt: 0,
                    }
                } else {
                    Phase::Refused
                };
            }
            Action::Crash(i) => {
                state.holders[i].phase = Phase::Crashed;
                state.crashes += 1;
            }
            Action::Timeout => {
                if state.txn.as_ref().is_none_or(|t| t.preparing) {
                    return None;
                }
                state.txn = None;
                state.epoch += 1;
                state.timeouts += 1;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(MARK_NEVER_DECREASES, |_, s: &State| {
                s.ledger.windows(2).all(|w| w[0] <= w[1])
            }),
            Property::always(NO_STALE_RECORD_VISIBLE, |_, s: &State| !s.stale_visible),
            Property::always(HIGHEST_HOLDER_OWNS, |_, s: &State| {
                if !s.terminal() {
                    return true;
                }
                let Some(highest) = s.holders.iter().max_by_key(|h| h.token) else {
                    return true;
                };
                matches!(highest.phase, Phase::Crashed | Phase::Contended)
                    || (highest.phase == Phase::Owner && s.committed_mark() == Some(highest.token))
            }),
            Property::always(NOBODY_WAITS_FOREVER, |model: &KafkaClaim, s: &State| {
                let mut next = Vec::new();
                model.actions(s, &mut next);
                !next.is_empty() || s.terminal()
            }),
            Property::sometimes(THE_STORY_HAPPENS, |_, s: &State| {
                s.terminal()
                    && !s.data.is_empty()
                    && s.holders.iter().all(|h| h.phase != Phase::Crashed)
                    && s.holders.iter().any(|h| h.phase == Phase::Refused)
            }),
        ]
    }
}

/// Safety: the ledger's committed marks never go down.
pub const MARK_NEVER_DECREASES: &str = "the ledger's mark never decreases";
/// Safety: a read_committed reader never sees a record below a claim acknowledged before it.
pub const NO_STALE_RECORD_VISIBLE: &str =
    "no record below an acknowledged claim becomes visible after the claim";
/// Liveness, on every run that ends: the highest holder owns the domain.
pub const HIGHEST_HOLDER_OWNS: &str =
    "every run ends with the highest holder owning the domain, unless it crashed or ran out of attempts";
/// No state where nothing can happen but a holder is still at work.
pub const NOBODY_WAITS_FOREVER: &str = "no holder waits forever";
/// Reachability (the model is not vacuous): a run where records were committed and a stale
/// holder was refused.
pub const THE_STORY_HAPPENS: &str = "a run commits records and refuses a stale holder";
