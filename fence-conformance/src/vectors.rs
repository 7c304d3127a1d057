//! Decision vectors: fence-core's rule as an executable specification, run against an
//! adapter's own copy of it (Lua on Redis, PL/pgSQL on PostgreSQL, an etcd txn, S3's
//! conditional writes, Kafka's ledger decision).
//!
//! A store vector is a domain state reached through the store's public API — a mark; an entry
//! (absent, a value or a tombstone) written by a token at or below the mark; whether that write
//! carried the operation id `setup`, made after a claim when its token allows one (so its first
//! outcome names a previous mark) — and one request: a claim, or a put or delete with a token
//! from [`TOKENS`], either equal-token policy, no condition, `Absent` or a revision (the current
//! one, the next, the one before, `u64::MAX`), and no operation id, a fresh one, the setup's
//! replayed, or the setup's with another token. A log vector is a mark (by a claim, or by an
//! append with the operation id `setup`) and an append of the same kinds. The expected answer is
//! fence-core's `decide_write` / `decide_claim` / `decide_append` on the state the adapter
//! reports, which must be the state the setup made; an adapter must give the same answer, a
//! refusal or a replay must change nothing, and an applied request must read back as applied.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use fence_core::raw::pipeline::{self, ClaimDecision, Current, Decision};
use fence_core::raw::{OpMemory, OpRecord, TokenBounds};
use fence_core::{
    Accepted, AppendOutcome, AppendRequest, Appended, Capabilities, Domain, Entry,
    EqualTokenPolicy, FenceError, FencedLog, FencedStore, FencingToken, IssuerView, LogEntry,
    Mutation, OpIdRetention, OpOutcome, OperationId, Record, Revision, Snapshot, WriteCondition,
    WriteOutcome, WriteRequest,
};
use tokio::task::JoinSet;

mod corrupt;
mod issued;

pub use corrupt::{corrupt_vectors, run_corrupt, CorruptVector};
pub use issued::{all_issued, applicable_issued, run_issued, IssuedVector};

const MAX: u64 = u64::MAX;
/// The last integer a double holds exactly: a copy that compares tokens as doubles takes it for
/// the next one.
const DOUBLE_EXACT: u64 = 1 << 53;

/// The tokens requests carry: small ones, both sides of the doubles' edge, i64's limit, and
/// u64's last two.
pub const TOKENS: [u64; 8] = [
    1,
    2,
    3,
    DOUBLE_EXACT,
    DOUBLE_EXACT + 1,
    1 << 63,
    MAX - 1,
    MAX,
];

/// The entry a store vector's setup leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetupEntry {
    Absent,
    /// A value written by this token.
    Value(u64),
    /// A value written, then deleted, by this token.
    Tombstone(u64),
}

impl SetupEntry {
    fn writer(self) -> Option<u64> {
        match self {
            SetupEntry::Absent => None,
            SetupEntry::Value(w) | SetupEntry::Tombstone(w) => Some(w),
        }
    }
}

/// A domain state, reached through the public API.
#[derive(Clone, Copy, Debug)]
struct Setup {
    mark: Option<u64>,
    entry: SetupEntry,
    /// Whether the entry's first write carried the operation id `setup` (after a claim of 1
    /// when its token is above 1, so that its first outcome names a previous mark).
    with_op: bool,
}

impl Setup {
    /// The claim before the setup's write (its first outcome's previous mark).
    fn claim_first(self) -> Option<u64> {
        match self.entry.writer() {
            Some(writer) if self.with_op && writer > 1 => Some(1),
            _ => None,
        }
    }

    /// Whether the setup needs a claim: a mark above its writer, or a claim first.
    fn claims(self) -> bool {
        self.claim_first().is_some() || (self.mark.is_some() && self.mark != self.entry.writer())
    }
}

/// The write's condition, relative to the state.
#[derive(Clone, Copy, Debug)]
enum Condition {
    Any,
    Absent,
    /// The current revision (1 when nothing was written).
    Current,
    /// The one after the current.
    Next,
    /// The one before the current (only where it is at least 1).
    Previous,
    /// `u64::MAX`.
    Far,
}

/// The request's operation id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    None,
    Fresh,
    /// The setup's own operation id, with the setup's token: a retry.
    ReplayOfSetup,
    /// The setup's operation id with another token: a new operation for the rule.
    SetupIdOtherToken,
}

/// What a store vector asks.
#[derive(Clone, Copy, Debug)]
enum Request {
    Claim,
    Write {
        policy: EqualTokenPolicy,
        condition: Condition,
        delete: bool,
        op: Op,
    },
}

/// One store vector: a state, and a claim or a write of `token`.
#[derive(Clone, Copy, Debug)]
pub struct Vector {
    setup: Setup,
    token: u64,
    request: Request,
}

/// Every store setup: no mark; marks 2, 2^53 and `u64::MAX` with the entries they allow, each
/// with and without an operation id.
fn setups() -> Vec<Setup> {
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
        (DOUBLE_EXACT, &[SetupEntry::Value(DOUBLE_EXACT)][..]),
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
    setups
}

/// Every store vector (see the module docs).
pub fn all() -> Vec<Vector> {
    let mut vectors = Vec::new();
    for setup in setups() {
        let revision = match setup.entry {
            SetupEntry::Absent => 0,
            SetupEntry::Value(_) => 1,
            SetupEntry::Tombstone(_) => 2,
        };
        for (n, token) in TOKENS.into_iter().enumerate() {
            vectors.push(Vector {
                setup,
                token,
                request: Request::Claim,
            });
            for policy in [EqualTokenPolicy::SameOwner, EqualTokenPolicy::Strict] {
                for condition in [
                    Condition::Any,
                    Condition::Absent,
                    Condition::Current,
                    Condition::Next,
                    Condition::Previous,
                    Condition::Far,
                ] {
                    if matches!(condition, Condition::Previous) && revision < 2 {
                        continue;
                    }
                    for delete in [false, true] {
                        for op in [
                            Op::None,
                            Op::Fresh,
                            Op::ReplayOfSetup,
                            Op::SetupIdOtherToken,
                        ] {
                            let skip = match op {
                                // One replay per setup and request shape: its token is the
                                // setup's, whatever `token` says.
                                Op::ReplayOfSetup => !setup.with_op || n > 0,
                                Op::SetupIdOtherToken => {
                                    !setup.with_op || setup.entry.writer() == Some(token)
                                }
                                Op::None | Op::Fresh => false,
                            };
                            if !skip {
                                vectors.push(Vector {
                                    setup,
                                    token,
                                    request: Request::Write {
                                        policy,
                                        condition,
                                        delete,
                                        op,
                                    },
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    vectors
}

/// The store vectors an adapter with `capabilities` can answer: no claims or setups that need
/// one without claims, no conditions without revision compare-and-set, no operation ids
/// without their memory, no strict policy without it, no deletes or tombstones without
/// deletes. None when the store accepts only issued tokens: those run [`run_issued`], which
/// knows the issuer.
pub fn applicable(capabilities: &Capabilities) -> Vec<Vector> {
    if capabilities.issued_only {
        return Vec::new();
    }
    let remembers = capabilities.op_id_retention != OpIdRetention::None;
    all()
        .into_iter()
        .filter(|v| {
            capabilities.claim || !(v.setup.claims() || matches!(v.request, Request::Claim))
        })
        .filter(|v| remembers || !v.setup.with_op)
        .filter(|v| capabilities.delete || !matches!(v.setup.entry, SetupEntry::Tombstone(_)))
        .filter(|v| match v.request {
            Request::Claim => true,
            Request::Write {
                policy,
                condition,
                delete,
                op,
            } => {
                (capabilities.revision_cas || matches!(condition, Condition::Any))
                    && (remembers || op == Op::None)
                    && (capabilities.strict_policy || policy == EqualTokenPolicy::SameOwner)
                    && (capabilities.delete || !delete)
            }
        })
        .collect()
}

/// The checks beyond the rule an adapter declares (its step bound).
fn declared_bounds(capabilities: &Capabilities) -> TokenBounds {
    TokenBounds::new(capabilities.max_token_step, IssuerView::Unchecked)
}

/// Runs `vectors` against `store`, the n-th on `domains[n]` (fresh domains), at most
/// `parallel` at a time. `Err` lists the vectors whose answer or effect differs from the
/// rule's (the first twenty, in the vectors' order).
pub async fn run(
    store: Arc<dyn FencedStore>,
    vectors: Vec<Vector>,
    domains: Vec<Domain>,
    parallel: usize,
) -> Result<(), String> {
    let bounds = declared_bounds(&store.capabilities());
    run_each(vectors, domains, parallel, move |vector, domain| {
        let store = store.clone();
        async move { check(store.as_ref(), &domain, vector, bounds).await }
    })
    .await
}

/// Runs `check` on each vector with its domain, at most `parallel` at a time.
async fn run_each<V, F, Fut>(
    vectors: Vec<V>,
    domains: Vec<Domain>,
    parallel: usize,
    check: F,
) -> Result<(), String>
where
    V: Debug + Copy + Send + 'static,
    F: Fn(V, Domain) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    if vectors.len() != domains.len() {
        return Err(format!(
            "{} vectors for {} domains",
            vectors.len(),
            domains.len()
        ));
    }
    let count = vectors.len();
    let mut pending = vectors.into_iter().zip(domains).enumerate();
    let mut tasks = JoinSet::new();
    // Which vector each task runs, to name it when the task panics.
    let mut running = HashMap::new();
    let mut disagreements = Vec::new();
    loop {
        while tasks.len() < parallel.max(1) {
            let Some((n, (vector, domain))) = pending.next() else {
                break;
            };
            let checked = check(vector, domain);
            let task = tasks.spawn(async move { (n, checked.await) });
            running.insert(task.id(), (n, vector));
        }
        match tasks.join_next_with_id().await {
            Some(Ok((id, (n, result)))) => {
                if let (Some((_, vector)), Err(why)) = (running.remove(&id), result) {
                    disagreements.push((n, format!("{vector:?}: {why}")));
                }
            }
            Some(Err(failed)) => {
                let (n, vector) = running
                    .remove(&failed.id())
                    .map_or((usize::MAX, "?".to_owned()), |(n, v)| (n, format!("{v:?}")));
                disagreements.push((n, format!("{vector}: panicked: {failed}")));
            }
            None => break,
        }
    }
    if disagreements.is_empty() {
        return Ok(());
    }
    disagreements.sort_by_key(|(n, _)| *n);
    Err(format!(
        "{} of {count} vectors disagree with fence-core's rule:\n{}",
        disagreements.len(),
        disagreements
            .iter()
            .take(20)
            .map(|(_, why)| why.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    ))
}

/// One store vector on a fresh domain: `Err` says how the store disagreed.
async fn check(
    store: &dyn FencedStore,
    domain: &Domain,
    vector: Vector,
    bounds: TokenBounds,
) -> Result<(), String> {
    let first = set_up(store, domain, vector.setup).await?;
    let before = store
        .read(domain)
        .await
        .map_err(|e| format!("read after the setup: {e}"))?;
    expect_setup(&before, vector.setup)?;
    let Request::Write {
        policy,
        condition,
        delete,
        op,
    } = vector.request
    else {
        return check_claim(store, domain, token(vector.token), &before, bounds).await;
    };
    let current = current_of(&before)?;
    let presented = match op {
        Op::ReplayOfSetup => vector.setup.entry.writer().unwrap_or(vector.token),
        _ => vector.token,
    };
    let mutation = if delete {
        Mutation::Delete
    } else {
        Mutation::Put(format!("w{presented}").into())
    };
    let condition = match condition {
        Condition::Any => WriteCondition::Any,
        Condition::Absent => WriteCondition::Absent,
        Condition::Current => {
            WriteCondition::Revision(current.revision.unwrap_or(Revision::new(1)))
        }
        Condition::Next => {
            WriteCondition::Revision(current.revision.map_or(Revision::new(2), Revision::next))
        }
        Condition::Previous => WriteCondition::Revision(Revision::new(
            current
                .revision
                .map_or(1, |r| r.get().saturating_sub(1).max(1)),
        )),
        Condition::Far => WriteCondition::Revision(Revision::new(u64::MAX)),
    };
    let mut request = WriteRequest::new(domain.clone(), token(presented), mutation)
        .with_condition(condition)
        .with_policy(policy);
    match op {
        Op::None => {}
        Op::Fresh => request = request.with_op_id(op_id("fresh")),
        Op::ReplayOfSetup | Op::SetupIdOtherToken => request = request.with_op_id(op_id("setup")),
    }
    // The setup's record is remembered whatever the request carries.
    let ops = first.map_or_else(OpMemory::new, |first| OpMemory::from_records([first]));
    check_write(store, &request, &before, &ops, bounds).await
}

/// A write on the state `before` (whose remembered operations are `ops`): answered as
/// `decide_write` answers, applied as it says, or refused or replayed with nothing changed.
async fn check_write(
    store: &dyn FencedStore,
    request: &WriteRequest,
    before: &Snapshot,
    ops: &OpMemory,
    bounds: TokenBounds,
) -> Result<(), String> {
    let domain = request.domain();
    let expected = pipeline::decide_write(request, current_of(before)?, ops, bounds);
    let actual = store.write(request).await;
    let after = store
        .read(domain)
        .await
        .map_err(|e| format!("read after the write: {e}"))?;
    match (&expected, &actual) {
        (Ok(Decision::Apply { outcome, .. }), Ok(WriteOutcome::Accepted(got)))
            if same(outcome, got) =>
        {
            expect_applied(&after, request, outcome)
        }
        (Ok(Decision::Replay(first)), Ok(WriteOutcome::Duplicate(got))) if same(first, got) => {
            unchanged(before, &after)
        }
        (Err(rule), Err(got)) if same_refusal(rule, got) => unchanged(before, &after),
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
    bounds: TokenBounds,
) -> Result<(), String> {
    let expected = pipeline::decide_claim(domain, before.high_water_mark, token, bounds)
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

/// Builds the setup; returns the record of the setup's first write when it carried an
/// operation id, after checking that write's answer.
async fn set_up(
    store: &dyn FencedStore,
    domain: &Domain,
    setup: Setup,
) -> Result<Option<OpRecord>, String> {
    let failed = |what: &str, e: FenceError| format!("setup {setup:?}: {what}: {e}");
    if let Some(first) = setup.claim_first() {
        store
            .claim(domain, token(first))
            .await
            .map_err(|e| failed("first claim", e))?;
    }
    let mut record = None;
    if let Some(writer) = setup.entry.writer() {
        let mut request = WriteRequest::put(domain.clone(), token(writer), "setup");
        if setup.with_op {
            request = request.with_op_id(op_id("setup"));
        }
        let answer = store.write(&request).await.map_err(|e| failed("put", e))?;
        let wanted = Accepted::new(
            token(writer),
            Revision::new(1),
            setup.claim_first().map(token),
        );
        match answer {
            WriteOutcome::Accepted(got) if same(&wanted, &got) => {}
            other => return Err(format!("setup {setup:?}: the put answered {other:?}")),
        }
        if setup.with_op {
            record = Some(OpRecord::new(
                wanted.token,
                op_id("setup"),
                wanted.previous_high_water_mark,
                OpOutcome::Write {
                    revision: wanted.revision,
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
        if setup.entry.writer() != Some(mark) {
            store
                .claim(domain, token(mark))
                .await
                .map_err(|e| failed("claim", e))?;
        }
    }
    Ok(record)
}

/// The store must report the state the setup made: mark, entry kind, writer and revision.
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

/// The same refusal, with the same figures: only the refusals the rule itself gives.
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
        (
            FenceError::TokenTooFar {
                presented: a,
                current: b,
                max_step: s,
                ..
            },
            FenceError::TokenTooFar {
                presented: c,
                current: d,
                max_step: t,
                ..
            },
        ) => a == c && b == d && s == t,
        (
            FenceError::Unissued {
                presented: a,
                issuer: b,
                ..
            },
            FenceError::Unissued {
                presented: c,
                issuer: d,
                ..
            },
        ) => a == c && b == d,
        _ => false,
    }
}

/// One log vector: a mark (by a claim, or by an append that carried the operation id `setup`,
/// after a claim of 1 when its token is above 1) and an append.
#[derive(Clone, Copy, Debug)]
pub struct LogVector {
    mark: Option<u64>,
    /// Whether the mark came from an append with the operation id `setup`.
    with_op: bool,
    token: u64,
    policy: EqualTokenPolicy,
    op: Op,
}

/// Every log vector: marks {none, 2, 2^53, `u64::MAX`} (each by a claim and by an append with an
/// operation id), appends of every [`TOKENS`] token, both policies, and no operation id, a
/// fresh one, the setup's replayed, or the setup's with another token.
pub fn all_log() -> Vec<LogVector> {
    let mut vectors = Vec::new();
    for (mark, with_op) in [
        (None, false),
        (Some(2), false),
        (Some(2), true),
        (Some(DOUBLE_EXACT), false),
        (Some(DOUBLE_EXACT), true),
        (Some(MAX), false),
        (Some(MAX), true),
    ] {
        for (n, token) in TOKENS.into_iter().enumerate() {
            for policy in [EqualTokenPolicy::SameOwner, EqualTokenPolicy::Strict] {
                for op in [
                    Op::None,
                    Op::Fresh,
                    Op::ReplayOfSetup,
                    Op::SetupIdOtherToken,
                ] {
                    let skip = match op {
                        Op::ReplayOfSetup => !with_op || n > 0,
                        Op::SetupIdOtherToken => !with_op || mark == Some(token),
                        Op::None | Op::Fresh => false,
                    };
                    if !skip {
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
    }
    vectors
}

/// The log vectors a log with `capabilities` can answer (see [`applicable`]).
pub fn applicable_log(capabilities: &Capabilities) -> Vec<LogVector> {
    if capabilities.issued_only {
        return Vec::new();
    }
    let remembers = capabilities.op_id_retention != OpIdRetention::None;
    all_log()
        .into_iter()
        .filter(|v| remembers || (v.op == Op::None && !v.with_op))
        .filter(|v| capabilities.claim || v.mark.is_none())
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
    let bounds = declared_bounds(&log.capabilities());
    run_each(vectors, domains, parallel, move |vector, domain| {
        let log = log.clone();
        async move { check_log(log.as_ref(), &domain, vector, bounds).await }
    })
    .await
}

/// One log vector on a fresh domain: `Err` says how the log disagreed.
async fn check_log(
    log: &dyn FencedLog,
    domain: &Domain,
    vector: LogVector,
    bounds: TokenBounds,
) -> Result<(), String> {
    let failed = |what: &str, e: FenceError| format!("setup: {what}: {e}");
    let mut ops = OpMemory::new();
    match (vector.mark, vector.with_op) {
        (Some(mark), true) => {
            let claimed_first = (mark > 1).then_some(1);
            if let Some(first) = claimed_first {
                log.claim(domain, token(first))
                    .await
                    .map_err(|e| failed("first claim", e))?;
            }
            let setup = AppendRequest::new(domain.clone(), token(mark), vec![Record::new("setup")])
                .with_op_id(op_id("setup"));
            let answer = log.append(&setup).await.map_err(|e| failed("append", e))?;
            let wanted = Appended::new(token(mark), 1, claimed_first.map(token));
            match answer {
                AppendOutcome::Appended(got) if got == wanted => {}
                other => return Err(format!("setup: the append answered {other:?}")),
            }
            ops = OpMemory::from_records([OpRecord::new(
                wanted.token,
                op_id("setup"),
                wanted.previous_high_water_mark,
                OpOutcome::Append {
                    records: wanted.records,
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
        Op::ReplayOfSetup => vector.mark.unwrap_or(vector.token),
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
        Op::ReplayOfSetup | Op::SetupIdOtherToken => request = request.with_op_id(op_id("setup")),
    }
    let expected = pipeline::decide_append(&request, mark, &ops, bounds);
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
            let kept = after.len() >= before.len() && after[..before.len()] == before[..];
            let added = &after[before.len().min(after.len())..];
            let as_sent = added.len() == request.records().len()
                && added
                    .iter()
                    .zip(request.records())
                    .all(|(entry, record)| entry.token == got.token && entry.record == *record);
            if !kept || !as_sent || mark_after != Some(got.token) {
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

fn token(value: u64) -> FencingToken {
    crate::services::token(value)
}

fn op_id(name: &str) -> OperationId {
    OperationId::new(name).unwrap_or_else(|e| panic!("op id literal {name:?}: {e}"))
}
