//! Proves the fencing invariants from a recorded [`History`] (DESIGN.md §7.3):
//!
//! - **no stale acceptance**: no write or claim applied with a token below the mark at its
//!   acceptance (its own reported previous mark, and every token applied before it began);
//! - **the mark never decreases**: every observation of the mark (reads, refusals, the previous
//!   mark a write reports) is at least every token applied before the observation began;
//! - **no acknowledged write lost**: applied writes have distinct revisions, reads never go
//!   back past an acknowledged revision, and the final entry is the last applied write;
//! - **no forged mark**: every mark the resource reports is a token some worker presented;
//! - **logs** ([`History::final_log`]): tokens never decrease along the committed records; each
//!   committed batch appears whole, in order and once; no record of a batch that was refused or
//!   failed on every attempt is visible to read_committed; every acknowledged batch is there;
//! - **linearizable**: each window of the run has an order of its operations, consistent with
//!   real time, in which a sequential fenced register gives every recorded answer
//!   ([`crate::linearizable`]).
//!
//! Ambiguous operations are resolved from the history itself: a retry with the same operation
//! id that answers `Duplicate` says the first attempt applied (at that revision), one that
//! answers `Written` or `Fenced` says it did not (replays are decided before the token rule);
//! a read showing an ambiguous put's unique value says it applied, and on a log the final read
//! shows whether an ambiguous batch was committed (its records are unique). What stays unresolved may
//! have applied or not, and every check allows both.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use crate::history::{Event, History, LoggedRecord, Op, Outcome, SeenEntry};
use crate::linearizable;
use crate::resolve::{resolve, Resolved};

/// A property the checker proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Property {
    /// A write or claim applied with a token below the mark at its acceptance.
    StaleAccepted,
    /// An observation of the mark below a token applied before it began.
    MarkDecreased,
    /// An acknowledged write lost (a revision given twice, a read or the final state behind it).
    LostWrite,
    /// The final state is not the last applied write (or names a write no one made).
    FinalState,
    /// A mark no worker presented, or a refusal the acceptance rule does not allow.
    WrongRefusal,
    /// No linearization of a window explains its answers.
    NotLinearizable,
    /// A log's tokens decrease along its committed records, or a batch is torn, reordered or
    /// committed twice.
    LogOrder,
    /// A record of a batch refused (or failed) on every attempt is visible to read_committed.
    FencedVisible,
}

impl Property {
    /// Every property, in report order.
    pub const ALL: [Property; 8] = [
        Property::StaleAccepted,
        Property::MarkDecreased,
        Property::LostWrite,
        Property::FinalState,
        Property::WrongRefusal,
        Property::NotLinearizable,
        Property::LogOrder,
        Property::FencedVisible,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Property::StaleAccepted => "no stale acceptance",
            Property::MarkDecreased => "mark never decreases",
            Property::LostWrite => "no acknowledged write lost",
            Property::FinalState => "final state is the last applied write",
            Property::WrongRefusal => "refusals follow the rule",
            Property::NotLinearizable => "linearizable (bounded windows)",
            Property::LogOrder => "log tokens never decrease, batches whole and once",
            Property::FencedVisible => "no fenced or failed batch visible",
        }
    }
}

/// One violated property, with the events that show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What was violated.
    pub property: Property,
    /// Why, in words.
    pub detail: String,
    /// The smallest window of the history that shows it.
    pub window: Vec<Event>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "violated: {} — {}", self.property.name(), self.detail)?;
        for event in &self.window {
            writeln!(f, "  {event}")?;
        }
        Ok(())
    }
}

/// How the ambiguous operations of a history were resolved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ambiguity {
    /// Ambiguous operations in all.
    pub total: usize,
    /// Shown to have applied (a `Duplicate` retry, or a read of the value).
    pub applied: usize,
    /// Shown not to have applied (the retry applied, or was fenced).
    pub not_applied: usize,
    /// Further ambiguous attempts of an operation shown to have applied once (counted there).
    pub repeats: usize,
    /// Neither: every check allowed both.
    pub unresolved: usize,
}

/// What the checker found in one history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Operations recorded.
    pub operations: usize,
    /// Writes and claims applied at once.
    pub accepted: usize,
    /// Operations refused as stale.
    pub fenced: usize,
    /// Replays answered with the first outcome.
    pub duplicates: usize,
    /// Operations that failed before applying.
    pub failed: usize,
    /// Ambiguous operations and how they were resolved.
    pub ambiguity: Ambiguity,
    /// Windows checked for linearizability.
    pub windows_checked: usize,
    /// Windows too large to search (counted, not checked).
    pub windows_skipped: usize,
    /// Every violation found (empty: the history proves the invariants).
    pub violations: Vec<Violation>,
}

/// What a history proves, all properties together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Every property was checked over the whole history and holds.
    Holds,
    /// Nothing was violated, but some windows were not searched for linearizability (too large
    /// for the search, or after one that was and before a window with a known start): the
    /// history does not prove linearizability.
    Inconclusive,
    /// At least one property was violated.
    Violated,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Holds => "holds",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Violated => "violated",
        })
    }
}

impl Report {
    /// What the history proves: violated when any property failed, inconclusive when none did
    /// but windows were left unsearched, else holds.
    pub fn verdict(&self) -> Verdict {
        if !self.violations.is_empty() {
            Verdict::Violated
        } else if self.windows_skipped > 0 {
            Verdict::Inconclusive
        } else {
            Verdict::Holds
        }
    }

    /// True when every property was checked and holds ([`Verdict::Holds`]): a history with
    /// unsearched windows does not hold, it is inconclusive.
    pub fn holds(&self) -> bool {
        self.verdict() == Verdict::Holds
    }

    /// The violated properties, each once.
    pub fn violated(&self) -> BTreeSet<Property> {
        self.violations.iter().map(|v| v.property).collect()
    }
}

/// A write or claim known (or possibly known) to have applied.
#[derive(Clone, Copy, Debug)]
struct Applied {
    index: usize,
    token: u64,
    /// The revision a write produced (`None`: a claim).
    revision: Option<u64>,
    invoked: u64,
    /// When it had certainly applied.
    completed: u64,
}

/// Checks every property on `history`. A history whose store may refuse from a client-side
/// cache ([`History::refusals_from_cache`]) has each refusal's `current` checked as a mark the
/// resource accepted, at most the mark of that moment, rather than as the mark itself.
pub fn check(history: &History) -> Report {
    let events = &history.events;
    let mut report = Report {
        operations: events.len(),
        ..Report::default()
    };
    for event in events {
        match event.outcome {
            Outcome::Written { .. }
            | Outcome::Claimed { .. }
            | Outcome::Appended {
                duplicate: false, ..
            } => report.accepted += 1,
            Outcome::Fenced { .. } => report.fenced += 1,
            Outcome::Duplicate { .. }
            | Outcome::Appended {
                duplicate: true, ..
            } => report.duplicates += 1,
            Outcome::Failed(_) => report.failed += 1,
            Outcome::Ambiguous => report.ambiguity.total += 1,
            Outcome::Read { .. } => {}
        }
    }
    let resolved = resolve(events, history.final_log.as_deref());
    for r in resolved.values() {
        match r {
            Resolved::Applied { .. } => report.ambiguity.applied += 1,
            Resolved::NotApplied => report.ambiguity.not_applied += 1,
            Resolved::Repeat => report.ambiguity.repeats += 1,
            Resolved::Unresolved => report.ambiguity.unresolved += 1,
        }
    }
    let applied = applied_operations(events, &resolved);
    let mut violations = Vec::new();
    stale_acceptances(history, &applied, &mut violations);
    mark_observations(history, &applied, &mut violations);
    lost_writes(history, &applied, &resolved, &mut violations);
    refusals(history, &mut violations);
    if let Some(log) = &history.final_log {
        log_records(history, log, &resolved, &mut violations);
    }
    let windows = linearizable::check_windows(events, &resolved, history.refusals_from_cache);
    report.windows_checked = windows.checked;
    report.windows_skipped = windows.skipped;
    for (window, detail) in windows.failures {
        violations.push(Violation {
            property: Property::NotLinearizable,
            detail,
            window,
        });
    }
    report.violations = violations;
    report
}

fn applied_operations(events: &[Event], resolved: &BTreeMap<usize, Resolved>) -> Vec<Applied> {
    let mut applied = Vec::new();
    for (index, event) in events.iter().enumerate() {
        let Some(token) = event.op.token() else {
            continue;
        };
        let (revision, completed) = match (&event.outcome, resolved.get(&index)) {
            (Outcome::Written { revision, .. }, _) => (Some(*revision), event.completed),
            (
                Outcome::Claimed { .. }
                | Outcome::Appended {
                    duplicate: false, ..
                },
                _,
            ) => (None, event.completed),
            (Outcome::Ambiguous, Some(Resolved::Applied { revision, by })) => (*revision, *by),
            _ => continue,
        };
        applied.push(Applied {
            index,
            token,
            revision,
            invoked: event.invoked,
            completed,
        });
    }
    applied
}

/// For each sink, the greatest source value among sources completed before the sink was
/// invoked, with that source: the real-time order every property here is about.
fn before_each(sources: &[(u64, u64, usize)], sinks: &[(u64, usize)]) -> Vec<Option<(u64, usize)>> {
    // sources: (completed, value, event index); sinks: (invoked, event index).
    let mut by_completion: Vec<&(u64, u64, usize)> = sources.iter().collect();
    by_completion.sort_by_key(|s| s.0);
    let mut order: Vec<usize> = (0..sinks.len()).collect();
    order.sort_by_key(|&i| sinks[i].0);
    let mut out = vec![None; sinks.len()];
    let (mut next, mut best): (usize, Option<(u64, usize)>) = (0, None);
    for i in order {
        while next < by_completion.len() && by_completion[next].0 < sinks[i].0 {
            let (_, value, index) = *by_completion[next];
            if best.is_none_or(|(b, _)| value > b) {
                best = Some((value, index));
            }
            next += 1;
        }
        out[i] = best;
    }
    out
}

fn violation(history: &History, property: Property, detail: String, pair: &[usize]) -> Violation {
    let events = &history.events;
    let from = pair.iter().map(|&i| events[i].invoked).min().unwrap_or(0);
    let to = pair.iter().map(|&i| events[i].completed).max().unwrap_or(0);
    Violation {
        property,
        detail,
        window: history.window(from, to).into_iter().cloned().collect(),
    }
}

/// A violation the state after the run shows: the window is the run's last events.
fn at_the_end(history: &History, property: Property, detail: String) -> Violation {
    let end = history
        .events
        .iter()
        .map(|e| e.completed)
        .max()
        .unwrap_or(0);
    Violation {
        property,
        detail,
        window: history
            .window(end.saturating_sub(1), end)
            .into_iter()
            .cloned()
            .collect(),
    }
}

fn stale_acceptances(history: &History, applied: &[Applied], out: &mut Vec<Violation>) {
    let events = &history.events;
    for a in applied {
        let previous = match events[a.index].outcome {
            Outcome::Written { previous, .. }
            | Outcome::Claimed { previous }
            | Outcome::Appended {
                previous,
                duplicate: false,
            } => previous,
            _ => None,
        };
        if let Some(previous) = previous.filter(|&p| p > a.token) {
            out.push(violation(
                history,
                Property::StaleAccepted,
                format!(
                    "token {} applied over the mark {previous} it reported",
                    a.token
                ),
                &[a.index],
            ));
        }
    }
    let sources: Vec<_> = applied
        .iter()
        .map(|a| (a.completed, a.token, a.index))
        .collect();
    let sinks: Vec<_> = applied.iter().map(|a| (a.invoked, a.index)).collect();
    for (a, before) in applied.iter().zip(before_each(&sources, &sinks)) {
        if let Some((mark, source)) = before.filter(|(m, _)| *m > a.token) {
            out.push(violation(
                history,
                Property::StaleAccepted,
                format!(
                    "token {} applied although token {mark} had been applied before it began",
                    a.token
                ),
                &[source, a.index],
            ));
        }
    }
}

/// Every answer that reports the mark at some instant of its interval.
fn observed_mark(outcome: &Outcome) -> Option<Option<u64>> {
    match outcome {
        Outcome::Read { mark, .. } => Some(*mark),
        Outcome::Fenced { current } => Some(Some(*current)),
        Outcome::Written { previous, .. }
        | Outcome::Claimed { previous }
        | Outcome::Appended {
            previous,
            duplicate: false,
        } => Some(*previous),
        _ => None,
    }
}

fn mark_observations(history: &History, applied: &[Applied], out: &mut Vec<Violation>) {
    let events = &history.events;
    let mut sources: Vec<_> = applied
        .iter()
        .map(|a| (a.completed, a.token, a.index))
        .collect();
    let mut sinks = Vec::new();
    for (index, event) in events.iter().enumerate() {
        if let Some(mark) = observed_mark(&event.outcome) {
            // A refusal from a cache names a mark the resource accepted, maybe not the latest:
            // it bounds later observations, and is no observation of the present itself.
            let cached =
                history.refusals_from_cache && matches!(event.outcome, Outcome::Fenced { .. });
            if !cached {
                sinks.push((event.invoked, index));
            }
            if let Some(mark) = mark {
                sources.push((event.completed, mark, index));
            }
        }
    }
    for (&(_, index), before) in sinks.iter().zip(before_each(&sources, &sinks)) {
        let seen = observed_mark(&events[index].outcome).flatten();
        if let Some((mark, source)) = before.filter(|(m, _)| seen.is_none_or(|s| s < *m)) {
            // A write's own previous mark below an earlier token is a stale acceptance,
            // reported there; here only the observation.
            out.push(violation(
                history,
                Property::MarkDecreased,
                format!(
                    "the mark was seen as {} after {mark} had been applied or seen",
                    seen.map_or("none".to_owned(), |s| s.to_string())
                ),
                &[source, index],
            ));
        }
    }
}

fn lost_writes(
    history: &History,
    applied: &[Applied],
    resolved: &BTreeMap<usize, Resolved>,
    out: &mut Vec<Violation>,
) {
    let events = &history.events;
    let mut by_revision: BTreeMap<u64, usize> = BTreeMap::new();
    for a in applied {
        let Some(revision) = a.revision else { continue };
        if let Some(&other) = by_revision.get(&revision) {
            out.push(violation(
                history,
                Property::LostWrite,
                format!("two writes acknowledged at revision {revision}: one of them is lost"),
                &[other, a.index],
            ));
        } else {
            by_revision.insert(revision, a.index);
        }
    }
    // Revisions reads report never go back past an acknowledged or earlier-read revision.
    let mut sources: Vec<_> = applied
        .iter()
        .filter_map(|a| a.revision.map(|r| (a.completed, r, a.index)))
        .collect();
    let mut sinks = Vec::new();
    for (index, event) in events.iter().enumerate() {
        if let Outcome::Read { entry, .. } = event.outcome {
            sinks.push((event.invoked, index));
            sources.push((event.completed, entry.revision(), index));
        }
    }
    for (&(_, index), before) in sinks.iter().zip(before_each(&sources, &sinks)) {
        let Outcome::Read { entry, .. } = events[index].outcome else {
            continue;
        };
        if let Some((revision, source)) = before.filter(|(r, _)| entry.revision() < *r) {
            out.push(violation(
                history,
                Property::LostWrite,
                format!(
                    "a read saw revision {} after revision {revision} was acknowledged or read",
                    entry.revision()
                ),
                &[source, index],
            ));
        }
    }
    final_state(history, applied, &by_revision, resolved, out);
}

fn final_state(
    history: &History,
    applied: &[Applied],
    by_revision: &BTreeMap<u64, usize>,
    resolved: &BTreeMap<usize, Resolved>,
    out: &mut Vec<Violation>,
) {
    let events = &history.events;
    let Some((mark, entry)) = history.final_state else {
        return;
    };
    let tail = |detail: String, out: &mut Vec<Violation>| {
        out.push(at_the_end(history, Property::FinalState, detail));
    };
    // Tokens that may have applied without anyone knowing.
    let maybe: BTreeSet<u64> = resolved
        .iter()
        .filter(|(_, r)| **r == Resolved::Unresolved)
        .filter_map(|(&i, _)| events[i].op.token())
        .collect();
    let greatest = applied.iter().map(|a| a.token).max();
    match (mark, greatest) {
        (Some(m), Some(g)) if m < g => tail(
            format!("final mark {m} is below the applied token {g}: an acknowledged mark was lost"),
            out,
        ),
        (None, Some(g)) => tail(format!("no final mark, but token {g} was applied"), out),
        (Some(m), g) if g.is_none_or(|g| m > g) && !maybe.contains(&m) => tail(
            format!("final mark {m} is no applied or possibly applied token"),
            out,
        ),
        _ => {}
    }
    let last = by_revision.last_key_value();
    let revision = entry.revision();
    match last {
        Some((&r, _)) if r > revision => tail(
            format!("the final entry is at revision {revision}, but revision {r} was acknowledged"),
            out,
        ),
        Some((&r, &index)) if r == revision => {
            let Op::Write { token, value, .. } = &events[index].op else {
                return;
            };
            let expected = match value {
                Some(value) => SeenEntry::Value {
                    value: *value,
                    token: *token,
                    revision: r,
                },
                None => SeenEntry::Tombstone {
                    token: *token,
                    revision: r,
                },
            };
            if entry != expected {
                tail(
                    format!(
                        "the final entry is {entry:?}, but the last applied write is {expected:?}"
                    ),
                    out,
                );
            }
        }
        _ if revision > 0 => {
            // The final entry is a write no one saw acknowledged: only an unresolved
            // ambiguous write of its token may explain it.
            let explained = resolved.iter().any(|(&i, r)| {
                *r == Resolved::Unresolved
                    && matches!(&events[i].op, Op::Write { token, value, .. }
                        if Some(*token) == entry_token(entry)
                        && match entry { SeenEntry::Value { value: v, .. } => *value == Some(v), _ => value.is_none() })
            });
            if !explained {
                tail(
                    format!("the final entry {entry:?} is no write any worker made"),
                    out,
                );
            }
        }
        _ => {}
    }
}

fn entry_token(entry: SeenEntry) -> Option<u64> {
    match entry {
        SeenEntry::Absent => None,
        SeenEntry::Value { token, .. } | SeenEntry::Tombstone { token, .. } => Some(token),
    }
}

fn refusals(history: &History, out: &mut Vec<Violation>) {
    let events = &history.events;
    let presented: BTreeSet<u64> = events.iter().filter_map(|e| e.op.token()).collect();
    for (index, event) in events.iter().enumerate() {
        let reported = match (&event.outcome, event.op.token()) {
            (Outcome::Fenced { current }, Some(token)) if *current <= token => Some(format!(
                "token {token} refused although the mark was {current}: the rule accepts it"
            )),
            _ => None,
        };
        let forged = observed_mark(&event.outcome)
            .flatten()
            .filter(|m| !presented.contains(m))
            .map(|m| format!("the resource reported the mark {m}, which no worker presented"));
        for detail in reported.into_iter().chain(forged) {
            out.push(violation(history, Property::WrongRefusal, detail, &[index]));
        }
    }
}

/// One logical append: its attempts share the token and operation id (and the records).
#[derive(Debug, Default)]
struct Batch {
    values: Vec<u64>,
    token: u64,
    attempts: Vec<usize>,
    /// An attempt was answered committed (or resolved as applied).
    acknowledged: bool,
    /// An attempt may have committed (acknowledged, ambiguous and not refuted).
    may_commit: bool,
}

/// The log properties, from its committed records after the run.
fn log_records(
    history: &History,
    log: &[LoggedRecord],
    resolved: &BTreeMap<usize, Resolved>,
    out: &mut Vec<Violation>,
) {
    let events = &history.events;
    let tail =
        |property: Property, detail: String, attempts: &[usize], out: &mut Vec<Violation>| {
            out.push(if attempts.is_empty() {
                at_the_end(history, property, detail)
            } else {
                violation(history, property, detail, attempts)
            });
        };
    // Batches by their first record (unique per logical append).
    let mut batches: BTreeMap<u64, Batch> = BTreeMap::new();
    for (index, event) in events.iter().enumerate() {
        let Op::Append { token, values, .. } = &event.op else {
            continue;
        };
        let Some(&first) = values.first() else {
            continue;
        };
        let batch = batches.entry(first).or_default();
        batch.values.clone_from(values);
        batch.token = *token;
        batch.attempts.push(index);
        let applied = matches!(event.outcome, Outcome::Appended { .. })
            || matches!(resolved.get(&index), Some(Resolved::Applied { .. }));
        batch.acknowledged |= applied;
        batch.may_commit |= applied
            || matches!(
                resolved.get(&index),
                Some(Resolved::Unresolved | Resolved::Repeat)
            );
    }
    let first_of: HashMap<u64, u64> = batches
        .iter()
        .flat_map(|(&first, b)| b.values.iter().map(move |&v| (v, first)))
        .collect();
    // Along the log: tokens never decrease; each record belongs to a batch of its token.
    let mut positions: HashMap<u64, Vec<usize>> = HashMap::new();
    for (position, record) in log.iter().enumerate() {
        if let Some(previous) = position.checked_sub(1).map(|p| log[p]) {
            if record.token < previous.token {
                let attempts: Vec<usize> = [previous.value, record.value]
                    .iter()
                    .filter_map(|v| {
                        first_of
                            .get(v)
                            .and_then(|f| batches[f].attempts.last().copied())
                    })
                    .collect();
                tail(
                    Property::LogOrder,
                    format!(
                        "token {} committed after token {} (records {} and {} of the log)",
                        record.token,
                        previous.token,
                        position - 1,
                        position
                    ),
                    &attempts,
                    out,
                );
            }
        }
        match first_of.get(&record.value).map(|f| &batches[f]) {
            None => tail(
                Property::FinalState,
                format!(
                    "record {position} of the log ({}) is no record any worker appended",
                    record.value
                ),
                &[],
                out,
            ),
            Some(batch) if batch.token != record.token => tail(
                Property::LogOrder,
                format!(
                    "record {position} of the log carries token {}, its batch carried {}",
                    record.token, batch.token
                ),
                &batch.attempts,
                out,
            ),
            Some(_) => positions.entry(record.value).or_default().push(position),
        }
    }
    for batch in batches.values() {
        let seen: Vec<Option<&Vec<usize>>> =
            batch.values.iter().map(|v| positions.get(v)).collect();
        if seen.iter().all(Option::is_none) {
            if batch.acknowledged {
                tail(
                    Property::LostWrite,
                    format!(
                        "the batch {:?} of token {} was acknowledged but is not in the log",
                        batch.values, batch.token
                    ),
                    &batch.attempts,
                    out,
                );
            }
            continue;
        }
        if !batch.may_commit {
            tail(
                Property::FencedVisible,
                format!(
                    "the batch {:?} of token {} was refused or failed on every attempt, yet is visible",
                    batch.values, batch.token
                ),
                &batch.attempts,
                out,
            );
        }
        let whole = seen.iter().all(|p| p.is_some_and(|p| p.len() == 1));
        let start = seen
            .first()
            .copied()
            .flatten()
            .and_then(|p| p.first().copied());
        let contiguous = whole
            && start.is_some_and(|start| {
                seen.iter()
                    .enumerate()
                    .all(|(k, p)| p.is_some_and(|p| p[0] == start + k))
            });
        if !contiguous {
            tail(
                Property::LogOrder,
                format!(
                    "the batch {:?} of token {} is torn, reordered or committed twice (at positions {:?})",
                    batch.values, batch.token, seen
                ),
                &batch.attempts,
                out,
            );
        }
    }
}
