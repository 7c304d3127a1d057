//! The fenced register is linearizable on bounded windows: for each window of a run (every
//! window starts with no operation in flight), some order of its operations that respects real
//! time (an operation that completed before another began comes first) makes a sequential
//! fenced register — the acceptance rule of DESIGN.md §3, same-owner policy — give every
//! recorded answer. Wing & Gong's search with memoization of (linearized set, state).
//!
//! Ambiguous operations may take effect at any point after they began, or never; one the
//! history shows applied at revision r must produce r where it is placed. One the history shows
//! applied within its own window (a `Duplicate` retry, a read of its unique value) is required
//! there, no later than the answer that showed it. Any other left out of its window's order is
//! carried into the next window (a request can reach the server after its client gave up), and
//! dropped after that.

use std::collections::{BTreeMap, HashSet};

use crate::history::{Event, Op, Outcome, SeenEntry};
use crate::resolve::Resolved;

/// The most operations one window may hold (the search's bit set).
pub const MAX_WINDOW_OPERATIONS: usize = 128;
/// The most distinct end states carried from one window into the next.
const MAX_END_STATES: usize = 32;
/// The most search steps one window may take before it is counted as skipped.
const MAX_STEPS: usize = 2_000_000;

/// The sequential register the answers must come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Register {
    mark: Option<u64>,
    entry: SeenEntry,
}

impl Register {
    const FRESH: Register = Register {
        mark: None,
        entry: SeenEntry::Absent,
    };

    fn accepts(&self, token: u64) -> bool {
        self.mark.is_none_or(|m| token >= m)
    }

    /// The state after `op` takes effect, when the rule accepts it; `None` when it refuses.
    fn applied(&self, op: &Op) -> Option<Register> {
        match op {
            Op::Write { token, value, .. } if self.accepts(*token) => {
                let revision = self.entry.revision() + 1;
                let entry = match value {
                    Some(value) => SeenEntry::Value {
                        value: *value,
                        token: *token,
                        revision,
                    },
                    None => SeenEntry::Tombstone {
                        token: *token,
                        revision,
                    },
                };
                Some(Register {
                    mark: Some(*token),
                    entry,
                })
            }
            // A claim, or an append (a log's mark; its records are checked along the log).
            Op::Claim { token } | Op::Append { token, .. } if self.accepts(*token) => {
                Some(Register {
                    mark: Some(*token),
                    entry: self.entry,
                })
            }
            _ => None,
        }
    }

    /// The state after `op` answered `outcome` here, if the register would answer so.
    fn step(&self, op: &Op, outcome: &Outcome, cached_refusals: bool) -> Option<Register> {
        match outcome {
            Outcome::Written { revision, previous } => {
                let next = self.applied(op)?;
                (matches!(op, Op::Write { .. })
                    && *previous == self.mark
                    && next.entry.revision() == *revision)
                    .then_some(next)
            }
            Outcome::Claimed { previous } => {
                let next = self.applied(op)?;
                (matches!(op, Op::Claim { .. }) && *previous == self.mark).then_some(next)
            }
            Outcome::Appended {
                previous,
                duplicate: false,
            } => {
                let next = self.applied(op)?;
                (matches!(op, Op::Append { .. }) && *previous == self.mark).then_some(next)
            }
            Outcome::Fenced { current } => {
                let token = op.token()?;
                let mark = self.mark?;
                // A refusal from a cache names a mark accepted earlier, at most this one.
                let seen = if cached_refusals {
                    *current <= mark
                } else {
                    *current == mark
                };
                (seen && token < *current).then_some(*self)
            }
            Outcome::Read { mark, entry } => {
                (*mark == self.mark && *entry == self.entry).then_some(*self)
            }
            _ => None,
        }
    }
}

/// One operation as the search sees it.
#[derive(Clone, Debug)]
struct Candidate<'a> {
    event: &'a Event,
    /// An ambiguous operation not known to have applied in this window: it may be left out.
    optional: bool,
    /// For an ambiguous operation, the revision it must produce if known.
    revision: Option<u64>,
    invoked: u64,
    /// When it had certainly taken effect (`u64::MAX` for an optional one).
    completed: u64,
}

/// What checking every window found.
#[derive(Debug, Default)]
pub(crate) struct Windows {
    pub(crate) checked: usize,
    pub(crate) skipped: usize,
    /// The window's events and why no order explains them.
    pub(crate) failures: Vec<(Vec<Event>, String)>,
}

/// A start state and the ambiguous operations carried into the window with it.
type Start<'a> = (Register, Vec<Candidate<'a>>);

/// Checks each window in turn, starting from a fresh register.
pub(crate) fn check_windows(
    events: &[Event],
    resolved: &BTreeMap<usize, Resolved>,
    cached_refusals: bool,
) -> Windows {
    let mut windows = Windows::default();
    let mut by_window: BTreeMap<u32, Vec<(usize, &Event)>> = BTreeMap::new();
    for (index, event) in events.iter().enumerate() {
        by_window
            .entry(event.window)
            .or_default()
            .push((index, event));
    }
    let mut starts: Vec<Start<'_>> = vec![(Register::FRESH, Vec::new())];
    // After a window the search gave up on: its possibly pending ambiguous operations, until a
    // window's anchor read gives a known start state again.
    let mut lost: Option<Vec<Candidate<'_>>> = None;
    for (window, members) in by_window {
        // The window's last answer: evidence after it may concern a later window.
        let window_end = members.iter().map(|(_, e)| e.completed).max().unwrap_or(0);
        let mut own = Vec::new();
        for (index, event) in members {
            let (optional, revision, completed) = match (&event.outcome, resolved.get(&index)) {
                // Replays and failures changed nothing; refuted ambiguities neither.
                (
                    Outcome::Duplicate { .. }
                    | Outcome::Appended {
                        duplicate: true, ..
                    }
                    | Outcome::Failed(_),
                    _,
                ) => continue,
                (Outcome::Ambiguous, Some(Resolved::NotApplied | Resolved::Repeat)) => continue,
                // Shown applied by an answer within this window: it took effect before it.
                (Outcome::Ambiguous, Some(Resolved::Applied { revision, by }))
                    if *by <= window_end =>
                {
                    (false, *revision, *by)
                }
                (Outcome::Ambiguous, Some(Resolved::Applied { revision, .. })) => {
                    (true, *revision, u64::MAX)
                }
                (Outcome::Ambiguous, _) => (true, None, u64::MAX),
                _ => (false, None, event.completed),
            };
            own.push(Candidate {
                event,
                optional,
                revision,
                invoked: event.invoked,
                completed,
            });
        }
        if let Some(pending) = lost.take() {
            match anchor(&own) {
                Some(start) => starts = vec![(start, pending)],
                None => {
                    // No known start: this window is skipped too; its ambiguities pend on
                    // (those of the window before it have had their one window).
                    windows.skipped += 1;
                    lost = Some(distinct(own.into_iter().filter(|c| c.optional).collect()));
                    continue;
                }
            }
        }
        let mut next: Vec<Start<'_>> = Vec::new();
        let mut explained = false;
        let mut too_large = false;
        for (state, carried) in &starts {
            let mut candidates: Vec<Candidate<'_>> = carried
                .iter()
                .map(|c| Candidate {
                    invoked: 0,
                    ..c.clone()
                })
                .collect();
            candidates.extend(own.iter().cloned());
            if candidates.len() > MAX_WINDOW_OPERATIONS {
                too_large = true;
                break;
            }
            match search(*state, &candidates, cached_refusals) {
                Search::Explained(ends) => {
                    explained = true;
                    for (end, left_out) in ends {
                        // Only this window's own ambiguities are carried on, once.
                        let carried: Vec<_> = left_out
                            .into_iter()
                            .filter(|&i| i >= carried.len())
                            .map(|i| candidates[i].clone())
                            .collect();
                        if next.len() < MAX_END_STATES
                            && !next.iter().any(|(s, c)| *s == end && same(c, &carried))
                        {
                            next.push((end, carried));
                        }
                    }
                }
                Search::Refuted => {}
                Search::TooLong => too_large = true,
            }
        }
        if too_large {
            // Without this window's end states the next window starts from its anchor read
            // (the engine reads before any other operation of a window), with every ambiguous
            // operation of this window and those carried into it possibly still to apply.
            windows.skipped += 1;
            let mut pending: Vec<Candidate<'_>> = starts
                .iter()
                .flat_map(|(_, carried)| carried.iter().cloned())
                .collect();
            pending.extend(own.into_iter().filter(|c| c.optional));
            lost = Some(distinct(pending));
            continue;
        }
        windows.checked += 1;
        if !explained {
            let mut shown: Vec<Event> = own.iter().map(|c| c.event.clone()).collect();
            shown.sort_by_key(|e| e.invoked);
            windows.failures.push((
                shown,
                format!(
                    "no order of window {window}'s {} operations, consistent with real time, \
                     gives their answers from a fenced register",
                    own.len()
                ),
            ));
            return windows;
        }
        starts = next;
    }
    windows
}

/// Each event once (the end states of a window may carry the same ambiguous operation).
fn distinct(candidates: Vec<Candidate<'_>>) -> Vec<Candidate<'_>> {
    let mut out: Vec<Candidate<'_>> = Vec::with_capacity(candidates.len());
    for c in candidates {
        if !out.iter().any(|o| std::ptr::eq(o.event, c.event)) {
            out.push(c);
        }
    }
    out
}

/// The state a window starts from when its first operation is a read that completed before any
/// other of its operations began (the engine's anchor read).
fn anchor(own: &[Candidate<'_>]) -> Option<Register> {
    let first = own.iter().min_by_key(|c| c.invoked)?;
    let Outcome::Read { mark, entry } = first.event.outcome else {
        return None;
    };
    let quiet = own
        .iter()
        .filter(|c| !std::ptr::eq(c.event, first.event))
        .all(|c| c.invoked > first.event.completed);
    quiet.then_some(Register { mark, entry })
}

fn same(a: &[Candidate<'_>], b: &[Candidate<'_>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| std::ptr::eq(x.event, y.event))
}

enum Search {
    /// End states, each with the optional candidates left out of that order.
    Explained(Vec<(Register, Vec<usize>)>),
    Refuted,
    TooLong,
}

fn search(start: Register, candidates: &[Candidate<'_>], cached_refusals: bool) -> Search {
    let required: u128 = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.optional)
        .fold(0, |mask, (i, _)| mask | 1 << i);
    let mut seen: HashSet<(u128, Register)> = HashSet::new();
    let mut ends: Vec<(Register, Vec<usize>)> = Vec::new();
    let mut stack = vec![(0u128, start)];
    let mut steps = 0;
    while let Some((done, state)) = stack.pop() {
        steps += 1;
        if steps > MAX_STEPS {
            return Search::TooLong;
        }
        if !seen.insert((done, state)) {
            continue;
        }
        if done & required == required {
            let left_out: Vec<usize> = (0..candidates.len())
                .filter(|i| done & (1 << i) == 0)
                .collect();
            if ends.len() < MAX_END_STATES
                && !ends.iter().any(|(s, l)| *s == state && *l == left_out)
            {
                ends.push((state, left_out));
            }
            // Optional operations may still take effect after every required one.
        }
        // Nothing may go before an operation that completed before it began.
        let horizon = candidates
            .iter()
            .enumerate()
            .filter(|(i, c)| done & (1 << i) == 0 && !c.optional)
            .map(|(_, c)| c.completed)
            .min()
            .unwrap_or(u64::MAX);
        for (i, c) in candidates.iter().enumerate() {
            if done & (1 << i) != 0 || c.invoked > horizon {
                continue;
            }
            let next = if c.event.outcome == Outcome::Ambiguous {
                state.applied(&c.event.op).filter(|n| {
                    c.revision.is_none_or(|r| n.entry.revision() == r)
                        && matches!(
                            c.event.op,
                            Op::Write { .. } | Op::Claim { .. } | Op::Append { .. }
                        )
                })
            } else {
                state.step(&c.event.op, &c.event.outcome, cached_refusals)
            };
            if let Some(next) = next {
                stack.push((done | 1 << i, next));
            }
        }
    }
    if ends.is_empty() {
        Search::Refuted
    } else {
        Search::Explained(ends)
    }
}
