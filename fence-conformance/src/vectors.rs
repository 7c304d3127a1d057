//! Decision vectors: fence-core's rule as an executable specification, run against a store's
//! own copy of it (Lua on Redis, PL/pgSQL on PostgreSQL, an etcd txn, S3's conditional writes).
//!
//! Every vector is a domain state reached through the store's public API (a mark, an entry —
//! absent, a value or a tombstone, written by a token at or below the mark —, and whether that
//! write carried an operation id) and one write (put or delete; a token below, at, above the
//! mark or `u64::MAX`; either equal-token policy; no condition, `Absent`, the current revision
//! or another one; no operation id, a fresh one, or the setup's own replayed). The expected
//! answer is `fence_core::pipeline::decide_write` on the state the store reports; the store must
//! give the same answer and, when it refuses, change nothing.

use std::sync::Arc;

use fence_core::pipeline::{self, ClaimDecision, Current, Decision};
use fence_core::{
    Accepted, AppendOutcome, AppendRequest, Capabilities, Domain, Entry, EqualTokenPolicy,
    FenceError, FencedLog, FencedStore, FencingToken, LogEntry, Mutation, OpIdRetention, OpMemory,
    OpOutcome, OpRecord, OperationId, Record, Revision, Snapshot, TokenBounds, WriteCondition,
    WriteOutcome, WriteRequest,
};
use tokio::task::JoinSet;

/// The entry a vector's setup leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetupEntry {
    Absent,
    /// A value written by this token.
    Value(u64),
    /// A value written, then deleted, by this token.
    Tombstone(u64),
}

/// A domain state, reached through the public API.
#[derive(Clone, Copy, Debug)]
struct Setup {
    mark: Option<u64>,
    entry: SetupEntry,
    /// Whether the entry's first write carried the operation id `setup`.
    with_op: bool,
}

/// The write's condition, relative to the state.
#[derive(Clone, Copy, Debug)]
enum Condition {
    Any,
    Absent,
    CurrentRevision,
    OtherRevision,
}

/// The write's operation id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    None,
    Fresh,
    /// The setup's own operation id, with the setup's token: a retry.
    ReplayOfSetup,
}

/// One vector: a state and a write, or a claim of `token` (`claim`: the write's fields are
/// unused).
#[derive(Clone, Copy, Debug)]
pub struct Vector {
    setup: Setup,
    claim: bool,
    token: u64,
    policy: EqualTokenPolicy,
    condition: Condition,
    delete: bool,
    op: Op,
}

/// Every vector: exhaustive over marks {none, 2, `u64::MAX`}, the entries they allow, tokens
/// {1, 2, 3, `u64::MAX`}, and for writes both policies, four conditions, put and delete, and
/// three kinds of operation id; for claims, the token alone.
pub fn all() -> Vec<Vector> {
    const MAX: u64 = u64::MAX;
    let mut setups = vec![Setup {
        mark: None,
        entry: SetupEntry::Absent,
        with_op: false,
    }];
    for (mark, entries) in [
        (
            2,
            &[
                SetupEntry::Value(1),
                SetupEntry::Value(2),
                SetupEntry::Tombstone(1),
                SetupEntry::Tombstone(2),
            ][..],
        ),
        (
            MAX,
            &[
                SetupEntry::Value(2),
                SetupEntry::Value(MAX),
                SetupEntry::Tombstone(MAX),
            ][..],
        ),
    ] {
        setups.push(Setup {
            mark: Some(mark),
            entry: SetupEntry::Absent,
            with_op: false,
        });
        for &entry in entries {
            for with_op in [false, true] {
                setups.push(Setup {
                    mark: Some(mark),
                    entry,
                    with_op,
                });
            }
        }
    }
    let mut vectors = Vec::new();
    for setup in setups {
        for token in [1, 2, 3, MAX] {
            vectors.push(Vector {
                setup,
                claim: true,
                token,
                policy: EqualTokenPolicy::SameOwner,
                condition: Condition::Any,
                delete: false,
                op: Op::None,
            });
            for policy in [EqualTokenPolicy::SameOwner, EqualTokenPolicy::Strict] {
                for condition in [
                    Condition::Any,
                    Condition::Absent,
                    Condition::CurrentRevision,
                    Condition::OtherRevision,
                ] {
                    for delete in [false, true] {
                        for op in [Op::None, Op::Fresh, Op::ReplayOfSetup] {
                            let replay_applies = setup.with_op && token == 1;
                            if op == Op::ReplayOfSetup && !replay_applies {
                                // One replay per setup and request shape is enough: its token
                                // is the setup's, whatever `token` says.
                                continue;
                            }
                            vectors.push(Vector {
                                setup,
                                claim: false,
                                token,
                                policy,
                                condition,
                                delete,
                                op,
                            });
                        }
                    }
                }
            }
        }
    }
    vectors
}

/// The vectors a store with `capabilities` can answer: without revision compare-and-set, only
/// unconditional writes; without operation-id memory, none that carries an operation id; without
/// the strict policy, none that asks for it.
pub fn applicable(capabilities: &Capabilities) -> Vec<Vector> {
    all()
        .into_iter()
        .filter(|v| capabilities.revision_cas || matches!(v.condition, Condition::Any))
        .filter(|v| {
            capabilities.op_id_retention != OpIdRetention::None
                || (v.op == Op::None && !v.setup.with_op)
        })
        .filter(|v| capabilities.strict_policy || v.policy == EqualTokenPolicy::SameOwner)
        .filter(|v| capabilities.claim || !v.claim)
        .filter(|v| {
            capabilities.delete || (!v.delete && !matches!(v.setup.entry, SetupEntry::Tombstone(_)))
        })
        .collect()
}

/// Runs `vectors` against `store`, the n-th on `domains[n]` (fresh domains), at most
/// `parallel` at a time. `Err` lists the vectors whose answer or effect differs from the
/// rule's (the first twenty).
pub async fn run(
    store: Arc<dyn FencedStore>,
    vectors: Vec<Vector>,
    domains: Vec<Domain>,
    parallel: usize,
) -> Result<(), String> {
    run_each(vectors, domains, parallel, move |vector, domain| {
        let store = store.clone();
        async move { check(store.as_ref(), &domain, vector).await }
    })
    .await
}

/// Runs `check` on each vector with its domain, at most `parallel` at a time; `Err` lists the
/// disagreements (the first twenty).
async fn run_each<V, F, Fut>(
    vectors: Vec<V>,
    domains: Vec<Domain>,
    parallel: usize,
    check: F,
) -> Result<(), String>
where
    V: std::fmt::Debug + Copy + Send + 'static,
    F: Fn(V, Domain) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let count = vectors.len();
    let mut pending = vectors.into_iter().zip(domains);
    let mut tasks = JoinSet::new();
    let mut disagreements = Vec::new();
    loop {
        while tasks.len() < parallel.max(1) {
            let Some((vector, domain)) = pending.next() else {
                break;
            };
            let checked = check(vector, domain);
            tasks.spawn(async move { checked.await.map_err(|why| format!("{vector:?}: {why}")) });
        }
        match tasks.join_next().await {
            Some(Ok(Ok(()))) => {}
            Some(Ok(Err(why))) => disagreements.push(why),
            Some(Err(panicked)) => disagreements.push(format!("a vector panicked: {panicked}")),
            None => break,
        }
    }
    if disagreements.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} of {count} vectors disagree with fence-core's rule:\n{}",
        disagreements.len(),
        disagreements
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    ))
}

/// One vector on a fresh domain: `Err` says how the store disagreed.
async fn check(store: &dyn FencedStore, domain: &Domain, vector: Vector) -> Result<(), String> {
    let first = set_up(store, domain, vector.setup).await?;
    let before = store
        .read(domain)
        .await
        .map_err(|e| format!("read after the setup: {e}"))?;
    expect_setup(&before, vector.setup)?;
    if vector.claim {
        return check_claim(store, domain, token(vector.token), &before).await;
    }
    let current = current_of(&before)?;
    let request = request(domain, vector, current.revision);
    let ops = match (&first, vector.op) {
        (Some(first), Op::ReplayOfSetup) => OpMemory::from_records([first.clone()]),
        _ => OpMemory::new(),
    };
    let expected = pipeline::decide_write(&request, current, &ops, TokenBounds::OPEN);
    let actual = store.write(&request).await;
    let after = store
        .read(domain)
        .await
        .map_err(|e| format!("read after the write: {e}"))?;
    match (&expected, &actual) {
        (Ok(Decision::Apply { outcome, .. }), Ok(WriteOutcome::Accepted(got)))
            if same(outcome, got) =>
        {
            expect_applied(&after, &request, outcome)
        }
        (Ok(Decision::Replay(first)), Ok(WriteOutcome::Duplicate(got))) if same(first, got) => {
            unchanged(&before, &after)
        }
        (Err(rule), Err(got)) if same_refusal(rule, got) => unchanged(&before, &after),
        _ => Err(format!(
            "the rule decides {expected:?}, the store answered {actual:?}"
        )),
    }
}

/// A claim on the state `before`: answered as `decide_claim` answers, the mark raised to the
/// token or left as it was, the entry untouched.
async fn check_claim(
    store: &dyn FencedStore,
    domain: &Domain,
    token: FencingToken,
    before: &Snapshot,
) -> Result<(), String> {
    let expected = pipeline::decide_claim(domain, before.high_water_mark, token, TokenBounds::OPEN)
        .map(ClaimDecision::claimed);
    let actual = store.claim(domain, token).await;
    let after = store
        .read(domain)
        .await
        .map_err(|e| format!("read after the claim: {e}"))?;
    match (&expected, &actual) {
        (Ok(rule), Ok(got)) if rule == got => {
            let raised = Snapshot::new(Some(token), before.entry.clone());
            if after != raised {
                return Err(format!("claimed {got:?}, but {before:?} became {after:?}"));
            }
            Ok(())
        }
        (Err(rule), Err(got)) if same_refusal(rule, got) => unchanged(before, &after),
        _ => Err(format!(
            "the rule decides the claim {expected:?}, the store answered {actual:?}"
        )),
    }
}

/// Builds the setup; returns the operation record of the setup's first write when it carried
/// an operation id.
async fn set_up(
    store: &dyn FencedStore,
    domain: &Domain,
    setup: Setup,
) -> Result<Option<OpRecord>, String> {
    let failed = |what: &str, e: FenceError| format!("setup {setup:?}: {what}: {e}");
    let mut first = None;
    if let SetupEntry::Value(writer) | SetupEntry::Tombstone(writer) = setup.entry {
        let mut request = WriteRequest::put(domain.clone(), token(writer), "setup");
        if setup.with_op {
            request = request.with_op_id(op_id("setup"));
        }
        let accepted = match store.write(&request).await.map_err(|e| failed("put", e))? {
            WriteOutcome::Accepted(accepted) => accepted,
            other => return Err(format!("setup {setup:?}: put answered {other:?}")),
        };
        if setup.with_op {
            first = Some(OpRecord::new(
                accepted.token,
                op_id("setup"),
                accepted.previous_high_water_mark,
                OpOutcome::Write {
                    revision: accepted.revision,
                },
            ));
        }
        if let SetupEntry::Tombstone(_) = setup.entry {
            store
                .write(&WriteRequest::delete(domain.clone(), token(writer)))
                .await
                .map_err(|e| failed("delete", e))?;
        }
    }
    if let Some(mark) = setup.mark {
        let written = match setup.entry {
            SetupEntry::Value(writer) | SetupEntry::Tombstone(writer) => Some(writer),
            SetupEntry::Absent => None,
        };
        if written != Some(mark) {
            store
                .claim(domain, token(mark))
                .await
                .map_err(|e| failed("claim", e))?;
        }
    }
    Ok(first)
}

/// The store must report the state the setup made.
fn expect_setup(snapshot: &Snapshot, setup: Setup) -> Result<(), String> {
    let entry_ok = match (setup.entry, &snapshot.entry) {
        (SetupEntry::Absent, Entry::Absent) => true,
        (
            SetupEntry::Value(w),
            Entry::Value {
                token, revision, ..
            },
        ) => token.get() == w && revision.get() == 1,
        (SetupEntry::Tombstone(w), Entry::Tombstone { token, revision }) => {
            token.get() == w && revision.get() == 2
        }
        _ => false,
    };
    if snapshot.high_water_mark.map(FencingToken::get) != setup.mark || !entry_ok {
        return Err(format!("the setup {setup:?} reads back as {snapshot:?}"));
    }
    Ok(())
}

fn current_of(snapshot: &Snapshot) -> Result<Current, String> {
    Ok(match &snapshot.entry {
        Entry::Absent => Current::mark(snapshot.high_water_mark),
        Entry::Value { revision, .. } => {
            Current::new(snapshot.high_water_mark, true, Some(*revision))
        }
        Entry::Tombstone { revision, .. } => {
            Current::new(snapshot.high_water_mark, false, Some(*revision))
        }
        other => return Err(format!("an entry the vectors do not know: {other:?}")),
    })
}

fn request(domain: &Domain, vector: Vector, revision: Option<Revision>) -> WriteRequest {
    let written = match vector.setup.entry {
        SetupEntry::Value(writer) | SetupEntry::Tombstone(writer) => writer,
        SetupEntry::Absent => vector.token,
    };
    let token = match vector.op {
        Op::ReplayOfSetup => written,
        _ => vector.token,
    };
    let mutation = if vector.delete {
        Mutation::Delete
    } else {
        Mutation::Put(format!("w{token}").into())
    };
    let condition = match vector.condition {
        Condition::Any => WriteCondition::Any,
        Condition::Absent => WriteCondition::Absent,
        Condition::CurrentRevision => {
            WriteCondition::Revision(revision.unwrap_or(Revision::new(1)))
        }
        Condition::OtherRevision => {
            WriteCondition::Revision(revision.map_or(Revision::new(7), Revision::next))
        }
    };
    let mut request = WriteRequest::new(domain.clone(), self::token(token), mutation)
        .with_condition(condition)
        .with_policy(vector.policy);
    match vector.op {
        Op::None => {}
        Op::Fresh => request = request.with_op_id(op_id("fresh")),
        Op::ReplayOfSetup => request = request.with_op_id(op_id("setup")),
    }
    request
}

/// The store applied the write as the rule said: the mark is the token, the entry holds the
/// mutation at the outcome's revision.
fn expect_applied(
    after: &Snapshot,
    request: &WriteRequest,
    outcome: &Accepted,
) -> Result<(), String> {
    let entry_ok = match (request.mutation(), &after.entry) {
        (
            Mutation::Put(value),
            Entry::Value {
                value: stored,
                token,
                revision,
            },
        ) => stored == value && *token == outcome.token && *revision == outcome.revision,
        (Mutation::Delete, Entry::Tombstone { token, revision }) => {
            *token == outcome.token && *revision == outcome.revision
        }
        _ => false,
    };
    if after.high_water_mark != Some(outcome.token) || !entry_ok {
        return Err(format!(
            "accepted as {outcome:?}, but reads back as {after:?}"
        ));
    }
    Ok(())
}

fn unchanged(before: &Snapshot, after: &Snapshot) -> Result<(), String> {
    if before != after {
        return Err(format!(
            "refused or replayed, yet {before:?} became {after:?}"
        ));
    }
    Ok(())
}

fn same(expected: &Accepted, got: &Accepted) -> bool {
    expected.token == got.token
        && expected.revision == got.revision
        && expected.previous_high_water_mark == got.previous_high_water_mark
}

/// The same refusal: the same kind, and for the rule's own refusals the same figures.
fn same_refusal(rule: &FenceError, got: &FenceError) -> bool {
    match (rule, got) {
        (
            FenceError::Fenced {
                presented: a,
                current: b,
                ..
            },
            FenceError::Fenced {
                presented: c,
                current: d,
                ..
            },
        ) => a == c && b == d,
        (
            FenceError::RevisionMismatch {
                expected: a,
                actual: b,
                ..
            },
            FenceError::RevisionMismatch {
                expected: c,
                actual: d,
                ..
            },
        ) => a == c && b == d,
        _ => rule.outcome_label() == got.outcome_label(),
    }
}

fn token(value: u64) -> FencingToken {
    crate::services::token(value)
}

fn op_id(name: &str) -> OperationId {
    OperationId::new(name).unwrap_or_else(|e| panic!("op id literal {name:?}: {e}"))
}

/// One log vector: a domain's mark (reached by a claim, or by an append that carried the
/// operation id `setup`) and an append.
#[derive(Clone, Copy, Debug)]
pub struct LogVector {
    mark: Option<u64>,
    /// Whether the mark came from an append with the operation id `setup`.
    with_op: bool,
    token: u64,
    policy: EqualTokenPolicy,
    op: Op,
}

/// Every log vector: marks {none, 2, `u64::MAX`} (each by a claim and by an append with an
/// operation id), appends of tokens {1, 2, 3, `u64::MAX`}, both policies, and no operation id,
/// a fresh one, or the setup's own replayed.
pub fn all_log() -> Vec<LogVector> {
    let mut vectors = Vec::new();
    for (mark, with_op) in [
        (None, false),
        (Some(2), false),
        (Some(2), true),
        (Some(u64::MAX), false),
        (Some(u64::MAX), true),
    ] {
        for token in [1, 2, 3, u64::MAX] {
            for policy in [EqualTokenPolicy::SameOwner, EqualTokenPolicy::Strict] {
                for op in [Op::None, Op::Fresh, Op::ReplayOfSetup] {
                    if op == Op::ReplayOfSetup && !(with_op && token == 1) {
                        continue;
                    }
                    vectors.push(LogVector {
                        mark,
                        with_op,
                        token,
                        policy,
                        op,
                    });
                }
            }
        }
    }
    vectors
}

/// The log vectors a log with `capabilities` can answer (see [`applicable`]).
pub fn applicable_log(capabilities: &Capabilities) -> Vec<LogVector> {
    all_log()
        .into_iter()
        .filter(|v| {
            capabilities.op_id_retention != OpIdRetention::None || (v.op == Op::None && !v.with_op)
        })
        .filter(|v| capabilities.strict_policy || v.policy == EqualTokenPolicy::SameOwner)
        .collect()
}

/// Runs log `vectors` against `log` as [`run`] does for stores.
pub async fn run_log(
    log: Arc<dyn FencedLog>,
    vectors: Vec<LogVector>,
    domains: Vec<Domain>,
    parallel: usize,
) -> Result<(), String> {
    run_each(vectors, domains, parallel, move |vector, domain| {
        let log = log.clone();
        async move { check_log(log.as_ref(), &domain, vector).await }
    })
    .await
}

/// One log vector on a fresh domain: `Err` says how the log disagreed.
async fn check_log(log: &dyn FencedLog, domain: &Domain, vector: LogVector) -> Result<(), String> {
    let failed = |what: &str, e: FenceError| format!("setup: {what}: {e}");
    let mut ops = OpMemory::new();
    match (vector.mark, vector.with_op) {
        (Some(mark), true) => {
            let setup = AppendRequest::new(domain.clone(), token(mark), vec![Record::new("setup")])
                .with_op_id(op_id("setup"));
            let outcome = log.append(&setup).await.map_err(|e| failed("append", e))?;
            let first = outcome.appended();
            ops = OpMemory::from_records([OpRecord::new(
                first.token,
                op_id("setup"),
                first.previous_high_water_mark,
                OpOutcome::Append {
                    records: first.records,
                },
            )]);
        }
        (Some(mark), false) => {
            log.claim(domain, token(mark))
                .await
                .map_err(|e| failed("claim", e))?;
        }
        (None, _) => {}
    }
    let mark = log
        .high_water_mark(domain)
        .await
        .map_err(|e| format!("mark after the setup: {e}"))?;
    if mark.map(FencingToken::get) != vector.mark {
        return Err(format!("the setup reads back the mark {mark:?}"));
    }
    let before = log
        .read_log(domain)
        .await
        .map_err(|e| format!("read after the setup: {e}"))?;
    let presented = match vector.op {
        Op::ReplayOfSetup => vector.mark.map_or(vector.token, |m| m),
        _ => vector.token,
    };
    let mut request = AppendRequest::new(
        domain.clone(),
        token(presented),
        vec![Record::new(format!("a{presented}")), Record::new("b")],
    )
    .with_policy(vector.policy);
    match vector.op {
        Op::None => {}
        Op::Fresh => request = request.with_op_id(op_id("fresh")),
        Op::ReplayOfSetup => request = request.with_op_id(op_id("setup")),
    }
    let expected = pipeline::decide_append(&request, mark, &ops, TokenBounds::OPEN);
    let actual = log.append(&request).await;
    let after = log
        .read_log(domain)
        .await
        .map_err(|e| format!("read after the append: {e}"))?;
    let mark_after = log
        .high_water_mark(domain)
        .await
        .map_err(|e| format!("mark after the append: {e}"))?;
    match (&expected, &actual) {
        (Ok(Decision::Apply { outcome, .. }), Ok(AppendOutcome::Appended(got)))
            if outcome == got =>
        {
            let added: Vec<_> = after.iter().skip(before.len()).collect();
            let as_sent = added.len() == request.records().len()
                && added
                    .iter()
                    .zip(request.records())
                    .all(|(entry, record)| entry.token == got.token && entry.record == *record);
            if !as_sent
                || after.len() != before.len() + added.len()
                || mark_after != Some(got.token)
            {
                return Err(format!(
                    "appended as {got:?}, but the log went from {before:?} to {after:?}, mark {mark_after:?}"
                ));
            }
            Ok(())
        }
        (Ok(Decision::Replay(first)), Ok(AppendOutcome::Duplicate(got))) if first == got => {
            log_unchanged(&before, &after, mark, mark_after)
        }
        (Err(rule), Err(got)) if same_refusal(rule, got) => {
            log_unchanged(&before, &after, mark, mark_after)
        }
        _ => Err(format!(
            "the rule decides {expected:?}, the log answered {actual:?}"
        )),
    }
}

fn log_unchanged(
    before: &[LogEntry],
    after: &[LogEntry],
    mark: Option<FencingToken>,
    mark_after: Option<FencingToken>,
) -> Result<(), String> {
    if before != after || mark != mark_after {
        return Err(format!(
            "refused or replayed, yet the log went from {before:?} (mark {mark:?}) to {after:?} (mark {mark_after:?})"
        ));
    }
    Ok(())
}
