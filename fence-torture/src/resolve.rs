//! Resolving ambiguous operations from the history itself: a retry with the same op id, a read
//! of a put's unique value, or (on a log) the final committed records.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::history::{Event, LoggedRecord, Op, Outcome, SeenEntry};

/// What the resolution step learned about each ambiguous event, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    Applied {
        revision: Option<u64>,
        by: u64,
    },
    NotApplied,
    /// Another ambiguous attempt of an operation counted once (at its first attempt).
    Repeat,
    Unresolved,
}

/// Links each ambiguous event to what later events (and a log's final records) show about it.
pub(crate) fn resolve(
    events: &[Event],
    final_log: Option<&[LoggedRecord]>,
) -> BTreeMap<usize, Resolved> {
    let logged: Option<BTreeSet<u64>> = final_log.map(|log| log.iter().map(|r| r.value).collect());
    // Values a read saw, with the revision it saw them at.
    let mut seen_values: HashMap<u64, (u64, u64)> = HashMap::new();
    for event in events {
        if let Outcome::Read {
            entry: SeenEntry::Value {
                value, revision, ..
            },
            ..
        } = event.outcome
        {
            seen_values
                .entry(value)
                .or_insert((revision, event.completed));
        }
    }
    let mut resolved = BTreeMap::new();
    for (index, event) in events.iter().enumerate() {
        if event.outcome != Outcome::Ambiguous {
            continue;
        }
        let verdict = by_retry(events, event).unwrap_or_else(|| match &event.op {
            // A read showing the put's unique value.
            Op::Write {
                value: Some(value), ..
            } => seen_values
                .get(value)
                .map_or(Resolved::Unresolved, |&(revision, by)| Resolved::Applied {
                    revision: Some(revision),
                    by,
                }),
            // The batch's records are unique: the committed log shows whether it applied
            // (known only after the run, so it bounds nothing in real time).
            Op::Append { values, .. } => match (&logged, values.first()) {
                (Some(logged), Some(first)) if logged.contains(first) => Resolved::Applied {
                    revision: None,
                    by: u64::MAX,
                },
                (Some(_), Some(_)) => Resolved::NotApplied,
                _ => Resolved::Unresolved,
            },
            _ => Resolved::Unresolved,
        });
        resolved.insert(index, verdict);
    }
    // The attempts of one operation (its token and op id, or its unique value) applied once:
    // the first is the one counted, the others changed nothing of their own.
    let mut counted: HashMap<(u64, Option<&str>, Option<u64>), usize> = HashMap::new();
    for (&index, verdict) in resolved.iter_mut() {
        let (token, value, op_id) = match &events[index].op {
            Op::Write {
                token,
                value,
                op_id,
            } => (token, *value, op_id),
            Op::Append {
                token,
                values,
                op_id,
            } => (token, values.first().copied(), op_id),
            _ => continue,
        };
        if matches!(verdict, Resolved::Applied { .. }) {
            let key = (
                *token,
                op_id.as_deref(),
                op_id.is_none().then_some(value).flatten(),
            );
            if counted.insert(key, index).is_some() {
                *verdict = Resolved::Repeat;
            }
        }
    }
    resolved
}

/// What the first answered later attempt of the same operation (same kind, token and op id)
/// says about an ambiguous `event`: a replay's answer shows it applied; any other answer shows
/// it did not (replays are decided before the token rule).
fn by_retry(events: &[Event], event: &Event) -> Option<Resolved> {
    let op_id = match &event.op {
        Op::Write {
            op_id: Some(op_id), ..
        }
        | Op::Append {
            op_id: Some(op_id), ..
        } => op_id,
        _ => return None,
    };
    let same = |op: &Op| match (op, &event.op) {
        (Op::Write { op_id: Some(o), .. }, Op::Write { .. })
        | (Op::Append { op_id: Some(o), .. }, Op::Append { .. }) => {
            o == op_id && op.token() == event.op.token()
        }
        _ => false,
    };
    let retry = events.iter().find(|later| {
        later.invoked >= event.completed
            && same(&later.op)
            && !matches!(later.outcome, Outcome::Ambiguous | Outcome::Failed(_))
    })?;
    Some(match retry.outcome {
        Outcome::Duplicate { revision, .. } => Resolved::Applied {
            revision: Some(revision),
            by: retry.completed,
        },
        Outcome::Appended {
            duplicate: true, ..
        } => Resolved::Applied {
            revision: None,
            by: retry.completed,
        },
        _ => Resolved::NotApplied,
    })
}
