//! The outbox relay's handover between lease holders (fence-outbox's `Relay` and its stores'
//! relay marks; DESIGN §5.7).
//!
//! A transition records its effects in the same atomic step as its fenced state change
//! (fence-core's [`rule::check_token`] decides it), so a refused transition records nothing.
//! Relays lease the partition; each step a relay takes on a domain's outbox — starting an
//! attempt on the head entry, settling it — carries its lease token and is refused below the
//! newest relay token seen there ([`rule::check_claim`], the rule every store's relay marks are
//! checked against by the conformance suite's `relay_marks_agree_with_the_rule`), or when the
//! entry is no longer the head, both in one atomic step per domain: what the Redis scripts and
//! PostgreSQL's per-step transaction do. What to do with the head — try it, retry it,
//! dead-letter it — is [`verdict::before_attempt`] (on the count read with the entry, then on
//! the store's count after `begin`) and [`verdict::after_attempt`], the functions the relay runs.
//!
//! **Modelled**: one domain; writers with distinct tokens, each recording one effect; relays
//! that lease the partition (a lease expires while its holder runs on — a pause past the TTL —
//! or after its holder crashed), read the pending entries, start attempts, send each to the
//! receiver, settle, and crash at any step; a receiver that applies each effect once (by its
//! idempotency key) and answers with success, a retryable failure, a timeout after applying it,
//! or a permanent failure. Every interleaving, so a relay paused between any two steps — a
//! zombie whose one request arrives late — is covered. **Not modelled**: several domains and
//! partitions (each domain's outbox is decided on its own); a relay's own request that arrives
//! after the relay timed out and moved on (a timeout here applies at once; the receiver sees
//! the same late arrival from a paused relay, which is modelled); the relay's timing guards (no
//! delivery starts that could outlive the lease, backoff between retries: they make handovers
//! mid-delivery rarer); lease renewal (a holder keeps its lease until it expires); a relay
//! noticing it lost its lease before a store refuses it; the read's `batch` limit and
//! PostgreSQL's `SKIP LOCKED` answering "moved" for a domain a writer holds (both only end a
//! pass early); purging, the candidate index, redrive of dead letters. **Kafka's relay store is
//! not this model**: it decides "moved" from its own view of the progress records, refreshed
//! when it lists candidates, and fences each step per relay partition
//! (`fence-outbox-progress/<relay>/<partition>`), not per domain, so a successor with a stale
//! view can send an entry its predecessor has just settled (a duplicate the receiver
//! deduplicates by key).

use std::fmt;

use fence_core::raw::rule;
use fence_core::{Domain, EqualTokenPolicy, FencingToken};
use fence_outbox::{verdict, Settlement, SinkError};
use stateright::{Model, Property};

/// Which protocol the writers and relays run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Variant {
    /// fence-outbox's: effects recorded in the fenced step; every relay step fenced by the
    /// relay's token and the head; the entry marked only after the receiver answered.
    Fence,
    /// Broken: the relay marks the entry delivered, then sends it. The checker must find an
    /// entry marked delivered that never reached the receiver (a crash in between).
    MarkBeforeDelivery,
    /// Broken: relay steps check only the head, not the relay's token. The checker must find a
    /// superseded relay sending more than the one request it had started.
    Unfenced,
    /// Broken: a transition is decided, then its effect recorded in a later step
    /// (check-then-write). The checker must find an effect recorded after a newer transition.
    CheckThenRecord,
    /// Broken: the relay judges only the attempt count it read with the entry, not the
    /// store's count after `begin` (the relay before this model). The checker must find an
    /// entry sent more often than the attempt limit.
    CountAsRead,
}

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct OutboxRelay {
    /// The writers' tokens, distinct, each transition recording one effect.
    pub writers: Vec<u64>,
    /// Relays competing for the partition's lease.
    pub relays: usize,
    /// Attempts per entry before it is dead-lettered (`RetryPolicy::max_attempts`).
    pub max_attempts: u32,
    /// Receiver answers other than success (retryable, timed out, permanent).
    pub failures: u8,
    /// Relay crashes.
    pub crashes: u8,
    /// Leases that expire while their holder runs on (a pause past the TTL).
    pub expiries: u8,
    /// The protocol.
    pub variant: Variant,
}

impl OutboxRelay {
    /// The bounds of `profile`, running `variant`.
    pub fn new(profile: crate::Profile, variant: Variant) -> Self {
        match profile {
            crate::Profile::Ci => OutboxRelay {
                writers: vec![2, 1, 3],
                relays: 2,
                max_attempts: 2,
                failures: 1,
                crashes: 1,
                expiries: 2,
                variant,
            },
            _ => OutboxRelay {
                writers: vec![2, 1, 3],
                relays: 3,
                max_attempts: 2,
                failures: 1,
                crashes: 1,
                expiries: 2,
                variant,
            },
        }
    }
}

impl fmt::Display for OutboxRelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outbox relay ({:?}): writers {:?}, {} relays, {} attempts, {} failure(s), {} crash(es), {} expiry(ies)",
            self.variant,
            self.writers,
            self.relays,
            self.max_attempts,
            self.failures,
            self.crashes,
            self.expiries
        )
    }
}

/// Where a writer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Writer {
    /// About to run its transition.
    Ready,
    /// Decided, not yet recorded (only [`Variant::CheckThenRecord`]).
    Decided,
    /// Its transition was accepted and its effect recorded.
    Recorded,
    /// Its transition was refused.
    Refused,
}

/// An entry's status in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Waiting at or behind the head.
    Pending,
    /// Marked delivered.
    Delivered,
    /// Dead-lettered.
    Dead,
}

/// One recorded effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The token of the transition that recorded it.
    token: u64,
    /// Attempts started.
    attempts: u32,
    /// Requests sent for it.
    sent: u32,
    status: Status,
}

impl Entry {
    fn new(token: u64) -> Self {
        Entry {
            token,
            attempts: 0,
            sent: 0,
            status: Status::Pending,
        }
    }
}

/// What the receiver answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Applied (or already applied: deduplicated), success.
    Applied,
    /// A retryable failure; nothing applied.
    Retryable,
    /// Applied, but the answer was lost: the relay times out (retryable).
    TimedOut,
    /// A permanent failure; nothing applied.
    Permanent,
}

/// Where a relay is; `seq` and `last` index the domain's entries from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between passes.
    Idle,
    /// Read the pending entries up to `last`; `next` is the one to try.
    Serving {
        /// The entry to try next.
        next: usize,
        /// The last entry it read.
        last: usize,
    },
    /// Started attempt `attempt` on `seq`; sends it next.
    Begun {
        /// The entry.
        seq: usize,
        /// The attempt, from 1.
        attempt: u32,
        /// The last entry it read.
        last: usize,
    },
    /// The receiver answered; settles next.
    Answered {
        /// The entry.
        seq: usize,
        /// The attempt, from 1.
        attempt: u32,
        /// The last entry it read.
        last: usize,
        /// The answer.
        answer: Answer,
    },
    /// Marked `seq` delivered before sending it (only [`Variant::MarkBeforeDelivery`]).
    Marked {
        /// The entry.
        seq: usize,
        /// The last entry it read.
        last: usize,
    },
}

/// One relay.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RelayState {
    /// The token of the lease it believes it holds.
    token: Option<u64>,
    phase: Phase,
    /// The attempt counts of the entries, as its last read saw them.
    seen: Vec<u32>,
    /// Requests it sent, in this lease term, after a newer relay's step was accepted.
    superseded_sends: u8,
    /// A step of its was accepted after a newer relay's.
    superseded_mark: bool,
}

impl RelayState {
    fn idle(token: Option<u64>) -> Self {
        RelayState {
            token,
            phase: Phase::Idle,
            seen: Vec::new(),
            superseded_sends: 0,
            superseded_mark: false,
        }
    }
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    writers: Vec<Writer>,
    /// The domain's mark (the highest transition token accepted).
    mark: Option<u64>,
    entries: Vec<Entry>,
    /// The store's relay mark for the domain.
    relay_mark: Option<u64>,
    /// The highest relay token any relay step was accepted with (the relay mark, unless a
    /// broken variant lowered it).
    newest_relay: u64,
    /// The live lease's token.
    lease: Option<u64>,
    /// The last relay token granted.
    granted: u64,
    relays: Vec<RelayState>,
    /// Entries in the order the receiver first applied them.
    applied: Vec<usize>,
    /// An entry was first applied after a later one while it was not dead-lettered.
    out_of_order: bool,
    /// A dead-lettered entry was first applied after a later one.
    late_dead_letter: bool,
    /// A relay step was refused for its token.
    relay_fenced: bool,
    failures: u8,
    crashes: u8,
    expiries: u8,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The writer runs its transition (or, check-then-record, decides it).
    Write(usize),
    /// The writer records its decided effect (only [`Variant::CheckThenRecord`]).
    Record(usize),
    /// The relay acquires the free lease.
    Acquire(usize),
    /// The relay reads the domain's pending entries.
    Read(usize),
    /// The relay starts an attempt on its next entry (or dead-letters it, attempts used up).
    Begin(usize),
    /// The relay sends its entry; the receiver answers.
    Send(usize, Answer),
    /// The relay settles the attempt as the answer calls for.
    Settle(usize),
    /// The relay marks its entry delivered before sending it (only
    /// [`Variant::MarkBeforeDelivery`]).
    MarkFirst(usize),
    /// The relay crashes: it forgets its lease and its work; the lease stays until it expires.
    Crash(usize),
    /// The live lease expires.
    Expire,
}

/// How the store answers a relay step.
enum Step {
    Accepted,
    /// The relay's token is below the relay mark.
    Fenced,
    /// The entry is no longer the pending head.
    Moved,
}

fn domain() -> Domain {
    Domain::new("orders").unwrap_or_else(|_| unreachable!("a valid domain"))
}

fn token(value: u64) -> FencingToken {
    FencingToken::new(value).unwrap_or(FencingToken::MAX)
}

impl State {
    /// The pending head's index.
    fn head(&self) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.status == Status::Pending)
    }

    fn terminal(&self, model: &OutboxRelay) -> bool {
        let mut next = Vec::new();
        model.actions(self, &mut next);
        next.is_empty()
    }
}

impl OutboxRelay {
    /// The store's check of a relay step on entry `seq`: the relay's token against the relay
    /// mark, then the head; an accepted step raises the mark to the relay's token.
    fn relay_step(&self, state: &mut State, r: usize, relay: u64, seq: usize) -> Step {
        let fenced = self.variant != Variant::Unfenced
            && rule::check_claim(&domain(), state.relay_mark.map(token), token(relay)).is_err();
        if fenced {
            state.relay_fenced = true;
            return Step::Fenced;
        }
        if state.head() != Some(seq) {
            return Step::Moved;
        }
        if state.newest_relay > relay {
            state.relays[r].superseded_mark = true;
        }
        state.relay_mark = Some(relay);
        state.newest_relay = state.newest_relay.max(relay);
        Step::Accepted
    }

    /// After entry `seq` is settled (or was settled by another), the relay goes on to the next
    /// entry it read, or ends its pass.
    fn onwards(seq: usize, last: usize) -> Phase {
        if seq < last {
            Phase::Serving {
                next: seq + 1,
                last,
            }
        } else {
            Phase::Idle
        }
    }

    /// A refused relay drops its lease (what the relay does on a fenced error).
    fn drop_lease(state: &mut State, r: usize) -> Phase {
        state.relays[r].token = None;
        Phase::Idle
    }

    /// Settles `seq` for relay `r` and moves it on; a retry ends its pass (the entry waits out its backoff).
    fn settle(&self, state: &mut State, r: usize, seq: usize, last: usize, verdict: &Settlement) {
        let Some(relay) = state.relays[r].token else {
            return;
        };
        let phase = match self.relay_step(state, r, relay, seq) {
            Step::Fenced => Self::drop_lease(state, r),
            Step::Moved => match verdict {
                Settlement::Retry { .. } => Phase::Idle,
                _ => Self::onwards(seq, last),
            },
            Step::Accepted => match verdict {
                Settlement::Retry { .. } => Phase::Idle,
                Settlement::Delivered => {
                    state.entries[seq].status = Status::Delivered;
                    Self::onwards(seq, last)
                }
                _ => {
                    state.entries[seq].status = Status::Dead;
                    Self::onwards(seq, last)
                }
            },
        };
        state.relays[r].phase = phase;
    }

    /// The receiver applies entry `seq` (once per idempotency key).
    fn apply(state: &mut State, seq: usize) {
        if state.applied.contains(&seq) {
            return;
        }
        let overtaken = state.applied.iter().any(|&other| other > seq);
        match state.entries[seq].status {
            _ if !overtaken => {}
            Status::Dead => state.late_dead_letter = true,
            _ => state.out_of_order = true,
        }
        state.applied.push(seq);
    }

    /// Relay `r` sends entry `seq`: counted when a newer relay has already acted.
    fn send(state: &mut State, r: usize, seq: usize, applied: bool) {
        state.entries[seq].sent += 1;
        if state.relays[r]
            .token
            .is_some_and(|t| state.newest_relay > t)
        {
            state.relays[r].superseded_sends += 1;
        }
        if applied {
            Self::apply(state, seq);
        }
    }
}

impl Model for OutboxRelay {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            writers: vec![Writer::Ready; self.writers.len()],
            mark: None,
            entries: Vec::new(),
            relay_mark: None,
            newest_relay: 0,
            lease: None,
            granted: 0,
            relays: vec![RelayState::idle(None); self.relays],
            applied: Vec::new(),
            out_of_order: false,
            late_dead_letter: false,
            relay_fenced: false,
            failures: 0,
            crashes: 0,
            expiries: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (w, writer) in state.writers.iter().enumerate() {
            match writer {
                Writer::Ready => actions.push(Action::Write(w)),
                Writer::Decided => actions.push(Action::Record(w)),
                _ => {}
            }
        }
        let head = state.head();
        for (r, relay) in state.relays.iter().enumerate() {
            let Some(_) = relay.token else {
                if state.lease.is_none() {
                    actions.push(Action::Acquire(r));
                }
                continue;
            };
            match relay.phase {
                Phase::Idle if head.is_some() => actions.push(Action::Read(r)),
                Phase::Idle => {}
                Phase::Serving { .. } => actions.push(Action::Begin(r)),
                Phase::Begun { .. } if self.variant == Variant::MarkBeforeDelivery => {
                    actions.push(Action::MarkFirst(r));
                }
                Phase::Begun { .. } => {
                    actions.push(Action::Send(r, Answer::Applied));
                    if state.failures < self.failures {
                        actions.push(Action::Send(r, Answer::Retryable));
                        actions.push(Action::Send(r, Answer::TimedOut));
                        actions.push(Action::Send(r, Answer::Permanent));
                    }
                }
                Phase::Marked { .. } => actions.push(Action::Send(r, Answer::Applied)),
                Phase::Answered { .. } => actions.push(Action::Settle(r)),
            }
            if state.crashes < self.crashes {
                actions.push(Action::Crash(r));
            }
        }
        if let Some(lease) = state.lease {
            // A running holder's lease expires only by a pause past its TTL (bounded); a lease
            // no running relay holds always ends.
            let running = state.relays.iter().any(|r| r.token == Some(lease));
            if !running || state.expiries < self.expiries {
                actions.push(Action::Expire);
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Write(w) => {
                let presented = self.writers[w];
                let decision = rule::check_token(
                    &domain(),
                    state.mark.map(token),
                    token(presented),
                    EqualTokenPolicy::SameOwner,
                );
                state.writers[w] = match (decision, self.variant) {
                    (Err(_), _) => Writer::Refused,
                    (Ok(()), Variant::CheckThenRecord) => Writer::Decided,
                    (Ok(()), _) => {
                        // One atomic step: the mark and the effect together.
                        state.mark = Some(presented);
                        state.entries.push(Entry::new(presented));
                        Writer::Recorded
                    }
                };
            }
            Action::Record(w) => {
                let presented = self.writers[w];
                state.mark = Some(presented);
                state.entries.push(Entry::new(presented));
                state.writers[w] = Writer::Recorded;
            }
            Action::Acquire(r) => {
                state.granted += 1;
                state.lease = Some(state.granted);
                state.relays[r] = RelayState::idle(Some(state.granted));
            }
            Action::Read(r) => {
                let next = state.head()?;
                state.relays[r].seen = state.entries.iter().map(|e| e.attempts).collect();
                state.relays[r].phase = Phase::Serving {
                    next,
                    last: state.entries.len() - 1,
                };
            }
            Action::Begin(r) => {
                let Phase::Serving { next: seq, last } = state.relays[r].phase else {
                    return None;
                };
                let relay = state.relays[r].token?;
                // The relay judges the count it read; the store's count after `begin` again.
                let seen = state.relays[r].seen.get(seq).copied().unwrap_or(0);
                if let Some(dead) = verdict::before_attempt(seen, None, self.max_attempts) {
                    self.settle(&mut state, r, seq, last, &dead);
                    return Some(state);
                }
                state.relays[r].phase = match self.relay_step(&mut state, r, relay, seq) {
                    Step::Fenced => Self::drop_lease(&mut state, r),
                    Step::Moved => Self::onwards(seq, last),
                    Step::Accepted => {
                        state.entries[seq].attempts += 1;
                        let attempt = state.entries[seq].attempts;
                        let recount = match self.variant {
                            Variant::CountAsRead => None,
                            _ => verdict::before_attempt(attempt - 1, None, self.max_attempts),
                        };
                        if let Some(dead) = recount {
                            self.settle(&mut state, r, seq, last, &dead);
                            return Some(state);
                        }
                        Phase::Begun { seq, attempt, last }
                    }
                };
            }
            Action::MarkFirst(r) => {
                let Phase::Begun { seq, last, .. } = state.relays[r].phase else {
                    return None;
                };
                let relay = state.relays[r].token?;
                state.relays[r].phase = match self.relay_step(&mut state, r, relay, seq) {
                    Step::Fenced => Self::drop_lease(&mut state, r),
                    Step::Moved => Self::onwards(seq, last),
                    Step::Accepted => {
                        state.entries[seq].status = Status::Delivered;
                        Phase::Marked { seq, last }
                    }
                };
            }
            Action::Send(r, answer) => match state.relays[r].phase {
                Phase::Begun { seq, attempt, last } => {
                    let applied = matches!(answer, Answer::Applied | Answer::TimedOut);
                    Self::send(&mut state, r, seq, applied);
                    if answer != Answer::Applied {
                        state.failures += 1;
                    }
                    state.relays[r].phase = Phase::Answered {
                        seq,
                        attempt,
                        last,
                        answer,
                    };
                }
                Phase::Marked { seq, last } => {
                    Self::send(&mut state, r, seq, true);
                    state.relays[r].phase = Self::onwards(seq, last);
                }
                _ => return None,
            },
            Action::Settle(r) => {
                let Phase::Answered {
                    seq,
                    attempt,
                    last,
                    answer,
                } = state.relays[r].phase
                else {
                    return None;
                };
                let answer = match answer {
                    Answer::Applied => Ok(()),
                    Answer::Retryable => Err(SinkError::retryable("HTTP 503")),
                    Answer::TimedOut => Err(SinkError::retryable("delivery timed out")),
                    Answer::Permanent => Err(SinkError::permanent("HTTP 422")),
                };
                let settlement = verdict::after_attempt(&answer, attempt, self.max_attempts);
                self.settle(&mut state, r, seq, last, &settlement);
            }
            Action::Crash(r) => {
                state.crashes += 1;
                state.relays[r] = RelayState::idle(None);
            }
            Action::Expire => {
                let lease = state.lease.take()?;
                if state.relays.iter().any(|r| r.token == Some(lease)) {
                    state.expiries += 1;
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_STALE_EFFECT_RECORDED, |_, s: &State| {
                s.entries.windows(2).all(|w| w[0].token <= w[1].token)
                    && s.entries.iter().all(|e| Some(e.token) <= s.mark)
            }),
            Property::always(IN_ORDER, |_, s: &State| !s.out_of_order),
            Property::always(A_SUPERSEDED_RELAY_SENDS_AT_MOST_ONE, |_, s: &State| {
                s.relays
                    .iter()
                    .all(|r| r.superseded_sends <= 1 && !r.superseded_mark)
            }),
            Property::always(ATTEMPTS_BOUNDED, |model: &OutboxRelay, s: &State| {
                s.entries.iter().all(|e| e.sent <= model.max_attempts)
            }),
            Property::always(EVERY_EFFECT_SETTLED, |model: &OutboxRelay, s: &State| {
                !s.terminal(model)
                    || s.entries.iter().enumerate().all(|(i, e)| match e.status {
                        Status::Delivered => s.applied.contains(&i),
                        Status::Dead => true,
                        Status::Pending => false,
                    })
            }),
            Property::sometimes(THE_STORY_HAPPENS, |model: &OutboxRelay, s: &State| {
                s.relay_fenced
                    && s.writers.contains(&Writer::Refused)
                    && s.applied.len() == s.entries.len()
                    && s.entries.iter().all(|e| e.status == Status::Delivered)
                    && s.terminal(model)
            }),
            Property::sometimes(A_DEAD_LETTER_CAN_ARRIVE_LATE, |_, s: &State| {
                s.late_dead_letter
            }),
        ]
    }
}

/// Safety: every recorded effect belongs to a transition the domain's mark accepted, in
/// order (a refused transition records nothing, so the receiver never sees its effect).
pub const NO_STALE_EFFECT_RECORDED: &str =
    "no effect is recorded for a transition older than one recorded before it";
/// Safety: the receiver first applies a domain's effects in the order they were recorded —
/// except an entry already dead-lettered when a request for it arrives (see
/// [`A_DEAD_LETTER_CAN_ARRIVE_LATE`]).
pub const IN_ORDER: &str = "the receiver applies each domain's effects in order";
/// Safety: once a newer relay has acted on the domain, an older one sends at most the one
/// request it had started, and marks nothing.
pub const A_SUPERSEDED_RELAY_SENDS_AT_MOST_ONE: &str =
    "a superseded relay sends at most the one request it had started";
/// Safety: no entry is sent more often than the attempt limit, across handovers.
pub const ATTEMPTS_BOUNDED: &str = "no entry is sent more often than the attempt limit";
/// Liveness, on every run that ends (every run here does: attempts, failures, crashes and
/// expiries are bounded): nothing is left pending, and each effect marked delivered was applied
/// by the receiver, else it was dead-lettered.
pub const EVERY_EFFECT_SETTLED: &str =
    "every run ends with each effect applied and marked delivered, or dead-lettered";
/// Reachability (the model is not vacuous): a run where a stale transition and a stale relay
/// were refused and every effect was delivered.
pub const THE_STORY_HAPPENS: &str =
    "a run refuses a stale transition and a stale relay and delivers every effect";
/// Reachability, the limit [`IN_ORDER`] states: a relay's request for an entry arrives after
/// the entry was dead-lettered and a later one applied (a timeout or a paused relay; the
/// receiver sees it only if it tracks the order itself).
pub const A_DEAD_LETTER_CAN_ARRIVE_LATE: &str =
    "a request for a dead-lettered entry can arrive after a later entry";
