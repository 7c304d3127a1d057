//! The suite has teeth: a resource that breaks one sentence of the contract fails the scenarios
//! written for that sentence, every time, while the honest reference passes them. Store and log
//! alike; the table of faults × scenarios is the list of `catches!` below. A stale-accepting
//! server behind caching clients shows that stale tokens reach the server through other
//! holders' clients (`catches_behind_a_cache!`).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{log, store, LogHarness, Namespace, ScenarioResult, StoreHarness, Verdict};
use fence_core::raw::rule;
use fence_core::{
    Accepted, AppendOutcome, AppendRequest, Appended, BoxError, Capabilities, Claimed, Domain,
    Entry, EqualTokenPolicy, Fence, FenceError, FencedLog, FencedStore, FencingToken, InvalidInput,
    LogEntry, Mutation, OpIdRetention, Revision, Snapshot, WriteOutcome, WriteRequest,
};

/// The value limit both the honest and the faulty resource declare.
const MAX_VALUE_BYTES: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    /// Accepts every token (the resource ignores the token: "only metadata").
    AcceptsStale,
    /// Deleting forgets the high-water mark.
    DeleteDropsMark,
    /// Treats the strict policy like the same-owner one.
    IgnoresStrict,
    /// Claims change nothing.
    ClaimIgnored,
    /// A claim below the mark lowers it.
    ClaimLowersMark,
    /// Checks the token, releases the lock, then writes: check-in-the-client-then-write.
    CheckThenWrite,
    /// Revision conditions are ignored.
    IgnoresCondition,
    /// Declares op-id retention but forgets every op id: replays apply twice.
    ForgetsOpIds,
    /// A restart loses the marks of domains that were only claimed.
    RestartLosesClaims,
    /// Names `{a}` and `%7Ba%7D` reach the same state (a naive key scheme).
    CollidesDomains,
    /// Accepts values over the declared limit.
    AcceptsOversize,
    /// A write refused as stale still replaces the value.
    RefusedWriteMutates,
    /// Only the first record of a batch is committed.
    PartialBatch,
    /// Checks the token before looking up the op id: a late retry is `Fenced`, not replayed.
    ReplaysAfterTokenRule,
}

#[derive(Default)]
struct State {
    hwm: Option<FencingToken>,
    entry: Option<(Option<fence_core::Bytes>, FencingToken, Revision)>,
    /// First outcomes by (token, op id): revision and previous mark, or records appended.
    ops: HashMap<(FencingToken, String), (Revision, Option<FencingToken>, usize)>,
    log: Vec<LogEntry>,
}

struct Faulty {
    fault: Fault,
    domains: Mutex<HashMap<String, State>>,
}

impl fmt::Debug for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({:?})", self.fault)
    }
}

impl Faulty {
    fn with<R>(&self, d: &Domain, f: impl FnOnce(&mut State) -> R) -> R {
        let key = match self.fault {
            Fault::CollidesDomains => d.as_str().replace("%7B", "{").replace("%7D", "}"),
            _ => d.as_str().to_owned(),
        };
        let mut map = self.domains.lock().unwrap_or_else(|p| p.into_inner());
        f(map.entry(key).or_default())
    }

    fn remembers(&self) -> bool {
        self.fault != Fault::ForgetsOpIds
    }

    fn check_size(&self, d: &Domain, size: usize) -> Result<(), FenceError> {
        if size > MAX_VALUE_BYTES && self.fault != Fault::AcceptsOversize {
            return Err(InvalidInput::ValueTooLarge {
                domain: d.clone(),
                size,
                max: MAX_VALUE_BYTES,
            }
            .into());
        }
        Ok(())
    }
}

#[async_trait]
impl Fence for Faulty {
    fn backend(&self) -> &'static str {
        "faulty"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
            .with_append(true)
            .with_op_id_retention(OpIdRetention::PerDomain(64))
            .with_max_value_bytes(Some(MAX_VALUE_BYTES))
            .with_survives_restart(true)
    }

    async fn claim(&self, d: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.with(d, |s| {
            if self.fault != Fault::ClaimLowersMark {
                rule::check_claim(d, s.hwm, token)?;
            }
            let previous = s.hwm;
            if self.fault != Fault::ClaimIgnored {
                s.hwm = Some(token);
            }
            Ok(Claimed::new(token, previous))
        })
    }

    async fn high_water_mark(&self, d: &Domain) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.with(d, |s| s.hwm))
    }
}

#[async_trait]
impl FencedStore for Faulty {
    async fn write(&self, r: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let d = r.domain();
        if let Mutation::Put(value) = r.mutation() {
            self.check_size(d, value.len())?;
        }
        let policy = match (self.fault, r.policy()) {
            (Fault::IgnoresStrict, _) => EqualTokenPolicy::SameOwner,
            (_, policy) => policy,
        };
        let op = r.op_id().map(|op| (r.token(), op.as_str().to_owned()));
        let check = |s: &State| -> Result<(), FenceError> {
            if self.fault != Fault::AcceptsStale {
                rule::check_token(d, s.hwm, r.token(), policy)?;
            }
            if self.fault != Fault::IgnoresCondition {
                let live = matches!(s.entry, Some((Some(_), _, _)));
                rule::check_condition(d, r.condition(), live, s.entry.as_ref().map(|e| e.2))?;
            }
            Ok(())
        };
        if self.fault == Fault::CheckThenWrite {
            self.with(d, |s| check(s))?;
            tokio::task::yield_now().await;
        }
        self.with(d, |s| {
            if self.fault == Fault::ReplaysAfterTokenRule {
                rule::check_token(d, s.hwm, r.token(), policy)?;
            }
            if let Some(first) = op.as_ref().and_then(|op| s.ops.get(op)) {
                if self.remembers() {
                    let (revision, previous, _) = *first;
                    return Ok(WriteOutcome::Duplicate(Accepted::new(
                        r.token(),
                        revision,
                        previous,
                    )));
                }
            }
            let value = match r.mutation() {
                Mutation::Put(v) => Some(v.clone()),
                _ => None,
            };
            let revision = s.entry.as_ref().map_or(Revision::new(1), |e| e.2.next());
            if self.fault != Fault::CheckThenWrite {
                if let Err(refused) = check(s) {
                    if self.fault == Fault::RefusedWriteMutates && refused.is_fenced() {
                        s.entry = Some((value, r.token(), revision));
                    }
                    return Err(refused);
                }
            }
            let deleting = value.is_none();
            s.entry = Some((value, r.token(), revision));
            let accepted = Accepted::new(r.token(), revision, s.hwm);
            if let Some(op) = op {
                s.ops.insert(op, (revision, s.hwm, 0));
            }
            s.hwm = if deleting && self.fault == Fault::DeleteDropsMark {
                None
            } else {
                Some(r.token())
            };
            Ok(WriteOutcome::Accepted(accepted))
        })
    }

    async fn read(&self, d: &Domain) -> Result<Snapshot, FenceError> {
        Ok(self.with(d, |s| {
            let entry = match &s.entry {
                None => Entry::Absent,
                Some((Some(value), token, revision)) => Entry::Value {
                    value: value.clone(),
                    token: *token,
                    revision: *revision,
                },
                Some((None, token, revision)) => Entry::Tombstone {
                    token: *token,
                    revision: *revision,
                },
            };
            Snapshot::new(s.hwm, entry)
        }))
    }
}

#[async_trait]
impl FencedLog for Faulty {
    async fn append(&self, r: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        let d = r.domain();
        if r.records().is_empty() {
            return Err(InvalidInput::EmptyBatch { domain: d.clone() }.into());
        }
        self.check_size(d, r.records().iter().map(|x| x.value.len()).sum())?;
        let op = r.op_id().map(|op| (r.token(), op.as_str().to_owned()));
        self.with(d, |s| {
            if self.fault == Fault::ReplaysAfterTokenRule {
                rule::check_token(d, s.hwm, r.token(), r.policy())?;
            }
            if let Some(&(_, previous, records)) = op.as_ref().and_then(|op| s.ops.get(op)) {
                if self.remembers() {
                    return Ok(AppendOutcome::Duplicate(Appended::new(
                        r.token(),
                        records,
                        previous,
                    )));
                }
            }
            if self.fault != Fault::AcceptsStale {
                rule::check_token(d, s.hwm, r.token(), r.policy())?;
            }
            let take = match self.fault {
                Fault::PartialBatch => 1,
                _ => r.records().len(),
            };
            for record in r.records().iter().take(take) {
                s.log
                    .push(LogEntry::new(r.token(), r.op_id().cloned(), record.clone()));
            }
            let previous = s.hwm;
            if let Some(op) = op {
                s.ops
                    .insert(op, (Revision::new(1), previous, r.records().len()));
            }
            s.hwm = Some(r.token());
            Ok(AppendOutcome::Appended(Appended::new(
                r.token(),
                r.records().len(),
                previous,
            )))
        })
    }

    async fn read_log(&self, d: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        Ok(self.with(d, |s| s.log.clone()))
    }
}

struct Harness(Arc<Faulty>);

#[async_trait]
impl StoreHarness for Harness {
    fn store(&self) -> Arc<dyn FencedStore> {
        self.0.clone()
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        restart(&self.0);
        Ok(true)
    }
}

#[async_trait]
impl LogHarness for Harness {
    fn log(&self) -> Arc<dyn FencedLog> {
        self.0.clone()
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        restart(&self.0);
        Ok(true)
    }
}

/// A restart keeps everything, unless the fault loses what was only claimed.
fn restart(faulty: &Faulty) {
    if faulty.fault == Fault::RestartLosesClaims {
        let mut map = faulty.domains.lock().unwrap_or_else(|p| p.into_inner());
        for state in map.values_mut() {
            if state.entry.is_none() && state.log.is_empty() {
                state.hwm = None;
            }
        }
    }
}

fn harness(fault: Fault) -> Harness {
    Harness(Arc::new(Faulty {
        fault,
        domains: Mutex::default(),
    }))
}

async fn run<F, Fut>(fault: Fault, scenario: F) -> ScenarioResult
where
    F: Fn(&'static Harness, &'static Namespace) -> Fut,
    Fut: std::future::Future<Output = ScenarioResult>,
{
    // Leaked so the scenario's borrowed future can be awaited here; a few bytes per test.
    let h: &'static Harness = Box::leak(Box::new(harness(fault)));
    let ns: &'static Namespace = Box::leak(Box::new(Namespace::new("faults")));
    scenario(h, ns).await
}

/// How many times each fault is run against its scenario: it must be caught every time.
const RUNS: usize = 5;

/// `$test` runs `$scenario` on the honest resource (it must pass) and `RUNS` times on one with
/// `$fault` (it must fail every time), through `$run` (`run` for stores and logs by default,
/// `run_entry` for entry points).
macro_rules! catches {
    ($test:ident, $fault:expr, $scenario:path) => {
        catches!($test, $fault, $scenario, run);
    };
    ($test:ident, $fault:expr, $scenario:path, $run:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $test() {
            let honest = $run(Fault::None, |h, ns| $scenario(h, ns)).await;
            assert!(
                matches!(honest, Ok(Verdict::Passed)),
                "the honest resource must pass: {honest:?}"
            );
            for attempt in 1..=RUNS {
                let faulty = $run($fault, |h, ns| $scenario(h, ns)).await;
                // Caught by a check on the answers, not by an operation that merely failed.
                assert!(
                    matches!(&faulty, Err(failure) if !failure.is_unexpected_error()),
                    "{:?} went unnoticed by {} in run {attempt} of {RUNS}: {faulty:?}",
                    $fault,
                    stringify!($scenario)
                );
            }
        }
    };
}

// Store scenarios.
catches!(
    stale_tokens_are_caught,
    Fault::AcceptsStale,
    store::older_token_is_fenced
);
catches!(
    stale_tokens_caught_by_the_race,
    Fault::AcceptsStale,
    store::concurrent_writers_with_mixed_tokens
);
catches!(
    stale_tokens_caught_by_the_claim_race,
    Fault::AcceptsStale,
    store::concurrent_claims_and_writes
);
catches!(
    stale_tokens_caught_after_a_restart,
    Fault::AcceptsStale,
    store::state_survives_restart
);
catches!(
    dropped_mark_on_delete_is_caught,
    Fault::DeleteDropsMark,
    store::delete_leaves_tombstone_keeping_hwm
);
catches!(
    ignored_strict_policy_is_caught,
    Fault::IgnoresStrict,
    store::equal_token_strict_is_fenced
);
catches!(
    ignored_strict_policy_caught_by_the_race,
    Fault::IgnoresStrict,
    store::concurrent_strict_writers_one_winner_per_token
);
catches!(
    ignored_claim_is_caught,
    Fault::ClaimIgnored,
    store::claim_fences_before_first_write
);
catches!(
    a_claim_lowering_the_mark_is_caught,
    Fault::ClaimLowersMark,
    store::claim_fences_before_first_write
);
catches!(
    ignored_condition_is_caught,
    Fault::IgnoresCondition,
    store::revision_condition_is_checked
);
catches!(
    forgotten_op_ids_are_caught,
    Fault::ForgetsOpIds,
    store::op_id_replay_returns_first_outcome
);
catches!(
    forgotten_op_ids_caught_after_a_restart,
    Fault::ForgetsOpIds,
    store::state_survives_restart
);
catches!(
    a_claim_lost_on_restart_is_caught,
    Fault::RestartLosesClaims,
    store::state_survives_restart
);
catches!(
    colliding_domains_are_caught,
    Fault::CollidesDomains,
    store::domains_are_independent
);
catches!(
    accepted_oversize_is_caught,
    Fault::AcceptsOversize,
    store::invalid_input_is_rejected_before_io
);
catches!(
    a_refused_write_that_mutates_is_caught,
    Fault::RefusedWriteMutates,
    store::older_token_is_fenced
);

catches!(
    a_replay_after_the_token_rule_is_caught,
    Fault::ReplaysAfterTokenRule,
    store::op_id_replay_returns_first_outcome
);

// The decision vectors catch every fault of a store's copy of the rule.
catches!(
    vectors_catch_stale_tokens,
    Fault::AcceptsStale,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_a_dropped_mark_on_delete,
    Fault::DeleteDropsMark,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_an_ignored_strict_policy,
    Fault::IgnoresStrict,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_an_ignored_condition,
    Fault::IgnoresCondition,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_forgotten_op_ids,
    Fault::ForgetsOpIds,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_a_refused_write_that_mutates,
    Fault::RefusedWriteMutates,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_a_replay_after_the_token_rule,
    Fault::ReplaysAfterTokenRule,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_a_claim_lowering_the_mark,
    Fault::ClaimLowersMark,
    store::every_vector_agrees_with_the_rule
);
catches!(
    vectors_catch_an_ignored_claim,
    Fault::ClaimIgnored,
    store::every_vector_agrees_with_the_rule
);

// Log scenarios.
catches!(
    log_vectors_catch_stale_appends,
    Fault::AcceptsStale,
    log::log_every_vector_agrees_with_the_rule
);
catches!(
    log_vectors_catch_a_replay_after_the_token_rule,
    Fault::ReplaysAfterTokenRule,
    log::log_every_vector_agrees_with_the_rule
);
catches!(
    log_vectors_catch_forgotten_op_ids,
    Fault::ForgetsOpIds,
    log::log_every_vector_agrees_with_the_rule
);
catches!(
    log_vectors_catch_a_partial_batch,
    Fault::PartialBatch,
    log::log_every_vector_agrees_with_the_rule
);
catches!(
    stale_appends_are_caught,
    Fault::AcceptsStale,
    log::log_newer_appended_older_fenced
);
catches!(
    stale_appends_caught_by_the_race,
    Fault::AcceptsStale,
    log::log_concurrent_appenders_with_mixed_tokens
);
catches!(
    stale_appends_caught_after_a_restart,
    Fault::AcceptsStale,
    log::log_state_survives_restart
);
catches!(
    ignored_log_claim_is_caught,
    Fault::ClaimIgnored,
    log::log_claim_fences_before_first_append
);
catches!(
    forgotten_log_op_ids_are_caught,
    Fault::ForgetsOpIds,
    log::log_op_id_replay_returns_first_outcome
);
catches!(
    forgotten_log_op_ids_caught_after_a_restart,
    Fault::ForgetsOpIds,
    log::log_state_survives_restart
);
catches!(
    a_log_claim_lost_on_restart_is_caught,
    Fault::RestartLosesClaims,
    log::log_state_survives_restart
);
catches!(
    a_partial_batch_is_caught,
    Fault::PartialBatch,
    log::log_batch_is_all_or_nothing
);
catches!(
    colliding_log_domains_are_caught,
    Fault::CollidesDomains,
    log::log_domains_are_independent
);
catches!(
    an_oversized_batch_is_caught,
    Fault::AcceptsOversize,
    log::log_invalid_input_is_rejected_before_io
);

/// A client that refuses tokens below the greatest mark it has seen, with no request, like
/// fence-s3's ETag cache: correct on its own, and able to hide a server that accepts stale
/// tokens from a scenario that presents them only through the owner's client.
struct CachingClient {
    server: Arc<Faulty>,
    marks: Mutex<HashMap<Domain, FencingToken>>,
}

impl CachingClient {
    fn new(server: Arc<Faulty>) -> Self {
        CachingClient {
            server,
            marks: Mutex::default(),
        }
    }

    fn note(&self, d: &Domain, mark: Option<FencingToken>) {
        if let Some(mark) = mark {
            let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
            let known = marks.entry(d.clone()).or_insert(mark);
            *known = (*known).max(mark);
        }
    }

    fn refuse_known_stale(&self, d: &Domain, token: FencingToken) -> Result<(), FenceError> {
        let known = self
            .marks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(d)
            .copied();
        match known {
            Some(mark) if token < mark => rule::check_claim(d, Some(mark), token),
            _ => Ok(()),
        }
    }
}

impl fmt::Debug for CachingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CachingClient({:?})", self.server)
    }
}

#[async_trait]
impl Fence for CachingClient {
    fn backend(&self) -> &'static str {
        "caching"
    }

    fn capabilities(&self) -> Capabilities {
        self.server.capabilities()
    }

    async fn claim(&self, d: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.refuse_known_stale(d, token)?;
        let claimed = self.server.claim(d, token).await?;
        self.note(d, Some(token));
        Ok(claimed)
    }

    async fn high_water_mark(&self, d: &Domain) -> Result<Option<FencingToken>, FenceError> {
        let mark = self.server.high_water_mark(d).await?;
        self.note(d, mark);
        Ok(mark)
    }
}

#[async_trait]
impl FencedStore for CachingClient {
    async fn write(&self, r: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        // A retry with an op id may be a replay of an accepted write: only the server knows.
        if r.op_id().is_none() {
            self.refuse_known_stale(r.domain(), r.token())?;
        }
        let outcome = self.server.write(r).await?;
        self.note(r.domain(), Some(r.token()));
        Ok(outcome)
    }

    async fn read(&self, d: &Domain) -> Result<Snapshot, FenceError> {
        let snapshot = self.server.read(d).await?;
        self.note(d, snapshot.high_water_mark);
        Ok(snapshot)
    }
}

/// The owner's caching client as `store()`, a fresh one per `holder()`.
struct Cached {
    owner: Arc<CachingClient>,
}

#[async_trait]
impl StoreHarness for Cached {
    fn store(&self) -> Arc<dyn FencedStore> {
        self.owner.clone()
    }

    fn holder(&self) -> Arc<dyn FencedStore> {
        Arc::new(CachingClient::new(self.owner.server.clone()))
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        restart(&self.owner.server);
        Ok(true)
    }
}

async fn run_cached<F, Fut>(fault: Fault, scenario: F) -> ScenarioResult
where
    F: Fn(&'static Cached, &'static Namespace) -> Fut,
    Fut: std::future::Future<Output = ScenarioResult>,
{
    let server = Arc::new(Faulty {
        fault,
        domains: Mutex::default(),
    });
    let h: &'static Cached = Box::leak(Box::new(Cached {
        owner: Arc::new(CachingClient::new(server)),
    }));
    let ns: &'static Namespace = Box::leak(Box::new(Namespace::new("cached")));
    scenario(h, ns).await
}

/// A server that accepts stale tokens behind clients that cache marks: only scenarios that
/// present stale tokens through another holder's fresh client reach it, and each must.
macro_rules! catches_behind_a_cache {
    ($test:ident, $scenario:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $test() {
            let honest = run_cached(Fault::None, |h, ns| $scenario(h, ns)).await;
            assert!(
                matches!(honest, Ok(Verdict::Passed)),
                "the honest server behind caches must pass: {honest:?}"
            );
            for attempt in 1..=RUNS {
                let faulty = run_cached(Fault::AcceptsStale, |h, ns| $scenario(h, ns)).await;
                assert!(
                    matches!(&faulty, Err(failure) if !failure.is_unexpected_error()),
                    "a stale-accepting server hidden by client caches went unnoticed by {} in run {attempt}",
                    stringify!($scenario)
                );
            }
        }
    };
}

catches_behind_a_cache!(cache_older_token, store::older_token_is_fenced);
catches_behind_a_cache!(
    cache_fresh_resource,
    store::fresh_resource_accepts_old_token_until_newer
);
catches_behind_a_cache!(cache_claim, store::claim_fences_before_first_write);
catches_behind_a_cache!(cache_delete, store::delete_leaves_tombstone_keeping_hwm);
catches_behind_a_cache!(cache_op_id, store::op_id_replay_returns_first_outcome);
catches_behind_a_cache!(cache_restart, store::state_survives_restart);
catches_behind_a_cache!(cache_race, store::concurrent_writers_with_mixed_tokens);
catches_behind_a_cache!(cache_claim_race, store::concurrent_claims_and_writes);

/// Check-then-write is a race: it is caught by the racing scenarios in every one of 10 runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_then_write_is_caught_by_the_races_every_time() {
    for attempt in 1..=10 {
        let mixed = run(Fault::CheckThenWrite, |h, ns| {
            store::concurrent_writers_with_mixed_tokens(h, ns)
        })
        .await;
        let strict = run(Fault::CheckThenWrite, |h, ns| {
            store::concurrent_strict_writers_one_winner_per_token(h, ns)
        })
        .await;
        let caught = |r: &fence_conformance::ScenarioResult| matches!(r, Err(failure) if !failure.is_unexpected_error());
        assert!(
            caught(&mixed) || caught(&strict),
            "check-then-write passed both races in run {attempt}: {mixed:?} {strict:?}"
        );
    }
}

/// An entry point over the faulty store: each run is a write, so the revision counts runs.
struct EntryOver(Arc<Faulty>);

#[async_trait]
impl fence_conformance::entry::EntryHarness for EntryOver {
    async fn run(
        &self,
        call: &fence_conformance::entry::Call,
    ) -> Result<fence_conformance::entry::Ran, FenceError> {
        let mut request =
            WriteRequest::put(call.domain.clone(), call.token, "run").with_policy(call.policy);
        if let Some(op_id) = &call.op_id {
            request = request.with_op_id(op_id.clone());
        }
        let outcome = self.0.write(&request).await?;
        Ok(fence_conformance::entry::Ran {
            duplicate: outcome.is_duplicate(),
            previous: outcome.accepted().previous_high_water_mark,
        })
    }

    async fn applied(&self, domain: &Domain) -> Result<u64, FenceError> {
        Ok(self.0.read(domain).await?.revision().map_or(0, |r| r.get()))
    }

    fn fence(&self) -> Arc<dyn Fence> {
        self.0.clone()
    }
}

async fn run_entry<F, Fut>(fault: Fault, scenario: F) -> ScenarioResult
where
    F: Fn(&'static EntryOver, &'static Namespace) -> Fut,
    Fut: std::future::Future<Output = ScenarioResult>,
{
    let h: &'static EntryOver = Box::leak(Box::new(EntryOver(Arc::new(Faulty {
        fault,
        domains: Mutex::default(),
    }))));
    let ns: &'static Namespace = Box::leak(Box::new(Namespace::new("entry-faults")));
    scenario(h, ns).await
}

catches!(
    a_log_replay_after_the_token_rule_is_caught,
    Fault::ReplaysAfterTokenRule,
    log::log_op_id_replay_returns_first_outcome
);

// Entry-point scenarios (fenced scripts, outbox transitions).
catches!(
    stale_runs_are_caught,
    Fault::AcceptsStale,
    fence_conformance::entry::entry_newer_runs_older_fenced,
    run_entry
);
catches!(
    stale_runs_are_caught_by_the_race,
    Fault::AcceptsStale,
    fence_conformance::entry::entry_concurrent_runs_with_mixed_tokens,
    run_entry
);
catches!(
    an_entry_ignoring_strict_is_caught,
    Fault::IgnoresStrict,
    fence_conformance::entry::entry_equal_token_policy,
    run_entry
);
catches!(
    an_entry_ignoring_claims_is_caught,
    Fault::ClaimIgnored,
    fence_conformance::entry::entry_claim_fences_before_first_run,
    run_entry
);
catches!(
    an_entry_forgetting_op_ids_is_caught,
    Fault::ForgetsOpIds,
    fence_conformance::entry::entry_op_id_replay_returns_first_run,
    run_entry
);
catches!(
    an_entry_with_colliding_domains_is_caught,
    Fault::CollidesDomains,
    fence_conformance::entry::entry_domains_are_independent,
    run_entry
);
catches!(
    an_entry_replaying_after_the_token_rule_is_caught,
    Fault::ReplaysAfterTokenRule,
    fence_conformance::entry::entry_op_id_replay_returns_first_run,
    run_entry
);
catches!(
    an_entry_whose_refused_runs_still_apply_is_caught,
    Fault::RefusedWriteMutates,
    fence_conformance::entry::entry_newer_runs_older_fenced,
    run_entry
);
