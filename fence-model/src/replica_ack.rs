//! Redis's replica acknowledgement across a failover (fence-redis's `wait_for_replicas`;
//! its README, "Replicas and failover").
//!
//! Replication is asynchronous: the primary applies a fenced change, then `WAIT` counts the
//! replicas that have it, and fence-core's [`rule::check_replicas`] — what fence-redis calls —
//! makes fewer than asked `Unreplicated`, never a success. A failover promotes the most
//! up-to-date replica (what Sentinel and Cluster do). Then a mark acknowledged to its holder
//! survives the failover, and the stale holder it fenced stays fenced on the new primary, whose
//! check is fence-core's [`rule::check_token`] (the Lua script runs the same rule).
//!
//! **Modelled**: a primary with replicas, each a log of the marks applied in order; writers
//! that apply a mark, wait for replicas (or not) and are told the verdict; replication one entry
//! at a time; a replica's resynchronisation with a new primary, in one step up to the primary's
//! offset; failovers that take the primary down for good and promote a replica that has
//! resynchronised with the current primary. **Not modelled**: several domains and keys (one
//! mark stands for the domain's state), restarts from the append-only file (the real-server
//! tests kill and restart Redis), replicas chosen by Sentinel's priority rather than their
//! offset, a manual failover to a lagging replica — the documented loss, which the broken
//! variant shows — and a second failover while the remaining replicas are still
//! resynchronising with the new primary: it can lose an acknowledged mark (with the
//! resynchronisation one entry at a time, the full profile's two failovers find it), and
//! Sentinel can promote such a replica, so it is a limit of asynchronous replication the model
//! leaves out, not one Sentinel prevents. "Most up-to-date" is the longest log (Sentinel ranks
//! by the offsets it sampled).

use std::fmt;

use fence_core::raw::rule;
use fence_core::{Domain, EqualTokenPolicy, FencingToken, Operation};
use stateright::{Model, Property};

/// Which replica a failover promotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Promotion {
    /// The most up-to-date replica (Sentinel's and Cluster's choice).
    MostUpToDate,
    /// Any replica (a manual failover that does not check `master_repl_offset`).
    Any,
}

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct ReplicaAck {
    /// Replicas of the first primary.
    pub replicas: usize,
    /// Replicas a change must be acknowledged by (`wait_for_replicas(n, …)`; 0: no wait).
    pub requested: u32,
    /// The writers' tokens, each writing its mark once (their order is the order they start in).
    pub writers: Vec<u64>,
    /// Failovers that may happen.
    pub failovers: u8,
    /// Which replica a failover promotes.
    pub promotion: Promotion,
}

impl ReplicaAck {
    /// The bounds of `profile`, waiting for `requested` replicas and promoting by `promotion`.
    pub fn new(profile: crate::Profile, requested: u32, promotion: Promotion) -> Self {
        match profile {
            crate::Profile::Ci => ReplicaAck {
                replicas: 2,
                requested,
                writers: vec![2, 1],
                failovers: 1,
                promotion,
            },
            _ => ReplicaAck {
                replicas: 2,
                requested,
                writers: vec![3, 1, 2],
                failovers: 2,
                promotion,
            },
        }
    }
}

impl fmt::Display for ReplicaAck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "replica acknowledgement: {} replicas, WAIT for {}, writers {:?}, {} failover(s), promoting {:?}",
            self.replicas, self.requested, self.writers, self.failovers, self.promotion
        )
    }
}

/// Where a writer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Writer {
    /// About to send its fenced change to the primary.
    Ready,
    /// Applied on node `node` at log position `position` (from 1); waits for replicas.
    Waiting {
        /// The node that applied it.
        node: usize,
        /// Its position in that node's log, from 1.
        position: usize,
    },
    /// Told its change is replicated as asked: acknowledged.
    Acknowledged,
    /// Told `Unreplicated` (applied, maybe lost on failover; retryable).
    Unreplicated,
    /// Refused by the token rule.
    Refused,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Each node's log: the marks it applied, in order (node 0 is the first primary).
    logs: Vec<Vec<u64>>,
    primary: usize,
    down: Vec<bool>,
    /// Which nodes have been in touch with the current primary as its replicas since it
    /// became primary (a failover breaks every link until the replica resynchronises).
    linked: Vec<bool>,
    writers: Vec<Writer>,
    /// The highest mark acknowledged to its writer.
    acknowledged: u64,
    /// A change below an acknowledged mark was applied after the acknowledgement.
    stale_applied: bool,
    failovers: u8,
}

/// A step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The writer sends its fenced change to the primary.
    Write(usize),
    /// The writer's `WAIT` returns (in time or at its timeout) and it is told the verdict.
    Wait(usize),
    /// The replica copies the next entry of the primary's log (or resynchronises).
    Replicate(usize),
    /// The primary goes down for good; the replica is promoted.
    Failover(usize),
}

fn domain() -> Domain {
    Domain::new("invoices").unwrap_or_else(|_| unreachable!("a valid domain"))
}

fn token(value: u64) -> FencingToken {
    FencingToken::new(value).unwrap_or(FencingToken::MAX)
}

impl State {
    fn mark(&self, node: usize) -> Option<u64> {
        self.logs[node].iter().copied().max()
    }

    fn replicas(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.logs.len()).filter(|&n| n != self.primary && !self.down[n])
    }
}

impl Model for ReplicaAck {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let nodes = self.replicas + 1;
        vec![State {
            logs: vec![Vec::new(); nodes],
            primary: 0,
            down: vec![false; nodes],
            linked: vec![true; nodes],
            writers: vec![Writer::Ready; self.writers.len()],
            acknowledged: 0,
            stale_applied: false,
            failovers: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, writer) in state.writers.iter().enumerate() {
            match writer {
                Writer::Ready => actions.push(Action::Write(i)),
                Writer::Waiting { .. } => actions.push(Action::Wait(i)),
                _ => {}
            }
        }
        let primary = &state.logs[state.primary];
        for replica in state.replicas() {
            let log = &state.logs[replica];
            if !state.linked[replica] || !primary.starts_with(log) || log.len() < primary.len() {
                actions.push(Action::Replicate(replica));
            }
        }
        if state.failovers < self.failovers {
            // The most up-to-date replica among those in touch with the current primary: one
            // that has not resynchronised since the last failover is left out (two failovers in
            // a row before it caught up can lose marks: a limit, see the module docs).
            let candidates: Vec<usize> = state.replicas().filter(|&n| state.linked[n]).collect();
            let longest = candidates.iter().map(|&n| state.logs[n].len()).max();
            for replica in candidates {
                let promotable = match self.promotion {
                    Promotion::MostUpToDate => Some(state.logs[replica].len()) == longest,
                    _ => true,
                };
                if promotable {
                    actions.push(Action::Failover(replica));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Write(w) => {
                let presented = self.writers[w];
                let primary = state.primary;
                // The fenced script on the primary: the rule, then the change.
                let admitted = rule::check_token(
                    &domain(),
                    state.mark(primary).map(token),
                    token(presented),
                    EqualTokenPolicy::SameOwner,
                )
                .is_ok();
                if !admitted {
                    state.writers[w] = Writer::Refused;
                } else {
                    if presented < state.acknowledged {
                        state.stale_applied = true;
                    }
                    state.logs[primary].push(presented);
                    state.writers[w] = if self.requested == 0 {
                        // No WAIT: acknowledged as soon as the primary applied it.
                        state.acknowledged = state.acknowledged.max(presented);
                        Writer::Acknowledged
                    } else {
                        Writer::Waiting {
                            node: primary,
                            position: state.logs[primary].len(),
                        }
                    };
                }
            }
            Action::Wait(w) => {
                let Writer::Waiting { node, position } = state.writers[w] else {
                    return None;
                };
                let presented = self.writers[w];
                // WAIT on the node that applied the change: the replicas that have it now (a
                // node that went down answers nothing: none).
                let replicated = if state.down[node] {
                    0
                } else {
                    (0..state.logs.len())
                        .filter(|&n| n != node && !state.down[n])
                        .filter(|&n| state.logs[n].get(position - 1) == Some(&presented))
                        .count()
                };
                let replicated = u32::try_from(replicated).unwrap_or(u32::MAX);
                state.writers[w] = match rule::check_replicas(
                    &domain(),
                    Operation::Claim,
                    self.requested,
                    replicated,
                ) {
                    Ok(_) => {
                        state.acknowledged = state.acknowledged.max(presented);
                        Writer::Acknowledged
                    }
                    Err(_) => Writer::Unreplicated,
                };
            }
            Action::Replicate(replica) => {
                let primary = state.logs[state.primary].clone();
                let log = &mut state.logs[replica];
                if !state.linked[replica] {
                    // First contact with a new primary: the resynchronisation (a partial one
                    // from the backlog, or a full one for a diverged log) brings it up to the
                    // primary's offset. (Interrupted by a second failover, it could lose marks:
                    // the limit in the module docs, left out.)
                    *log = primary;
                    state.linked[replica] = true;
                } else if let Some(&next) = primary.get(log.len()) {
                    // Linked: the replication stream, one entry at a time.
                    log.push(next);
                }
            }
            Action::Failover(replica) => {
                let old = state.primary;
                state.down[old] = true;
                state.primary = replica;
                state.failovers += 1;
                state.linked = vec![false; state.logs.len()];
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ACKNOWLEDGED_MARK_SURVIVES, |_, s: &State| {
                s.acknowledged == 0 || s.mark(s.primary) >= Some(s.acknowledged)
            }),
            Property::always(NO_STALE_CHANGE_APPLIED, |_, s: &State| !s.stale_applied),
            Property::sometimes(THE_STORY_HAPPENS, |_, s: &State| {
                s.failovers > 0 && s.acknowledged > 0 && s.writers.contains(&Writer::Refused)
            }),
        ]
    }
}

/// Safety: the primary (after any failover) holds every acknowledged mark.
pub const ACKNOWLEDGED_MARK_SURVIVES: &str =
    "an acknowledged mark survives every failover the model allows";
/// Safety: no change with a token below an acknowledged mark is applied after it.
pub const NO_STALE_CHANGE_APPLIED: &str = "no change below an acknowledged mark is applied";
/// Reachability: a failover after an acknowledgement, and a stale writer refused.
pub const THE_STORY_HAPPENS: &str =
    "a failover follows an acknowledged mark and a stale writer is refused";
