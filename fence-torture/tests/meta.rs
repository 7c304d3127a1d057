//! The meta-test: torture runs against deliberately broken stores, each of which the checker
//! must catch, and against `MemoryFence`, which must hold. A checker that passes a broken
//! store proves nothing; this is what shows it has teeth.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fence_core::{
    Accepted, AppendOutcome, AppendRequest, Appended, Capabilities, Claimed, Domain, Entry, Fence,
    FenceError, FencedLog, FencedStore, FencingToken, LogEntry, MemoryFence, MemoryLeases,
    Mutation, Revision, Snapshot, WriteOutcome, WriteRequest,
};
use fence_torture::{check, engine, Profile, Property, Report, Target};

/// How a store is broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Defect {
    /// Checks the mark, yields, then writes: the check-then-write race this library removes.
    CheckThenWrite,
    /// Acknowledges every fifth write without storing it.
    DropsWrites,
    /// Forgets everything it holds every 40 operations (a restart without durability).
    ForgetsOnRestart,
    /// Refuses writes at the mark as if stale (a strict rule where same-owner was asked).
    RefusesEqual,
    /// Serves reads from a copy that lags (an asynchronous replica).
    StaleReads,
    /// A read during a write in flight sees the write's value under the revision from before
    /// it (a torn read of value and metadata kept apart): a state the register never had,
    /// while every read's mark and revision still move forward — only the linearizability
    /// search can tell.
    TornReads,
}

/// A register with the defect; otherwise the acceptance rule, same-owner policy.
#[derive(Debug)]
struct Broken {
    defect: Defect,
    state: Mutex<HashMap<Domain, Snapshot>>,
    lagging: Mutex<HashMap<Domain, Snapshot>>,
    /// For a write still in flight (`TornReads`): the revision before it and the one it set.
    torn: Mutex<HashMap<Domain, (Revision, Revision)>>,
    calls: AtomicU64,
}

impl Broken {
    fn new(defect: Defect) -> Self {
        Broken {
            defect,
            state: Mutex::new(HashMap::new()),
            lagging: Mutex::new(HashMap::new()),
            torn: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
        }
    }

    fn snapshot(&self, domain: &Domain) -> Snapshot {
        let state = self.state.lock().unwrap();
        state
            .get(domain)
            .cloned()
            .unwrap_or_else(|| Snapshot::new(None, Entry::Absent))
    }

    fn call(&self) -> u64 {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if self.defect == Defect::ForgetsOnRestart && n.is_multiple_of(40) {
            self.state.lock().unwrap().clear();
        }
        n
    }

    fn fenced(domain: &Domain, token: FencingToken, current: FencingToken) -> FenceError {
        FenceError::Fenced {
            domain: domain.clone(),
            presented: token,
            current,
        }
    }

    /// The rule's verdict on `token` against `mark`.
    fn admit(
        &self,
        domain: &Domain,
        token: FencingToken,
        mark: Option<FencingToken>,
    ) -> Result<(), FenceError> {
        match mark {
            Some(m) if token < m || (token == m && self.defect == Defect::RefusesEqual) => {
                Err(Self::fenced(domain, token, m))
            }
            _ => Ok(()),
        }
    }

    /// The write's effect on the state, under its lock.
    fn apply(
        &self,
        n: u64,
        request: &WriteRequest,
        before: &Snapshot,
    ) -> Result<Accepted, FenceError> {
        let (domain, token) = (request.domain(), request.token());
        let mut state = self.state.lock().unwrap();
        let snapshot = state
            .entry(domain.clone())
            .or_insert_with(|| Snapshot::new(None, Entry::Absent));
        if self.defect != Defect::CheckThenWrite {
            self.admit(domain, token, snapshot.high_water_mark)?;
        }
        let previous = if self.defect == Defect::CheckThenWrite {
            before.high_water_mark
        } else {
            snapshot.high_water_mark
        };
        let revision = Revision::new(snapshot_revision(snapshot) + 1);
        let accepted = Accepted::new(token, revision, previous);
        if self.defect == Defect::DropsWrites && n.is_multiple_of(5) {
            return Ok(accepted);
        }
        snapshot.high_water_mark = Some(token.max(snapshot.high_water_mark.unwrap_or(token)));
        if self.defect == Defect::CheckThenWrite {
            snapshot.high_water_mark = Some(token);
        }
        snapshot.entry = match request.mutation() {
            Mutation::Put(value) => Entry::Value {
                value: value.clone(),
                token,
                revision,
            },
            _ => Entry::Tombstone { token, revision },
        };
        if self.defect == Defect::StaleReads && n.is_multiple_of(3) {
            self.lagging
                .lock()
                .unwrap()
                .insert(domain.clone(), snapshot.clone());
        }
        // The revision this write replaced (0: none).
        let replaced = revision.get() - 1;
        if self.defect == Defect::TornReads && replaced > 0 {
            self.torn
                .lock()
                .unwrap()
                .insert(domain.clone(), (Revision::new(replaced), revision));
        }
        Ok(accepted)
    }
}

#[async_trait]
impl Fence for Broken {
    fn backend(&self) -> &'static str {
        "broken"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.call();
        let mut state = self.state.lock().unwrap();
        let snapshot = state
            .entry(domain.clone())
            .or_insert_with(|| Snapshot::new(None, Entry::Absent));
        let previous = snapshot.high_water_mark;
        if previous.is_some_and(|m| token < m) {
            return Err(Self::fenced(domain, token, previous.unwrap()));
        }
        snapshot.high_water_mark = Some(token);
        Ok(Claimed::new(token, previous))
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.snapshot(domain).high_water_mark)
    }
}

#[async_trait]
impl FencedStore for Broken {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let n = self.call();
        let (domain, token) = (request.domain(), request.token());
        let before = self.snapshot(domain);
        if self.defect == Defect::CheckThenWrite {
            self.admit(domain, token, before.high_water_mark)?;
            // The gap between the check and the write, where another writer gets in.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let accepted = self.apply(n, request, &before)?;
        if self.defect == Defect::TornReads {
            // Still in flight: the answer has not reached the writer yet.
            tokio::time::sleep(Duration::from_millis(3)).await;
            self.torn.lock().unwrap().remove(domain);
        }
        Ok(WriteOutcome::Accepted(accepted))
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.call();
        if self.defect == Defect::StaleReads {
            if let Some(lagging) = self.lagging.lock().unwrap().get(domain) {
                return Ok(lagging.clone());
            }
        }
        let mut snapshot = self.snapshot(domain);
        // Torn only while no later write has moved the entry on.
        if let Some((before, set)) = self.torn.lock().unwrap().get(domain) {
            if let Entry::Value { revision, .. } | Entry::Tombstone { revision, .. } =
                &mut snapshot.entry
            {
                if revision == set {
                    *revision = *before;
                }
            }
        }
        Ok(snapshot)
    }
}

fn snapshot_revision(snapshot: &Snapshot) -> u64 {
    match &snapshot.entry {
        Entry::Value { revision, .. } | Entry::Tombstone { revision, .. } => revision.get(),
        _ => 0,
    }
}

fn profile(seed: u64) -> Profile {
    Profile::new(seed, 4, 12, 6)
        .lease_ttl(Duration::from_millis(20))
        .pause_probability(0.1)
}

async fn torture(store: Arc<dyn FencedStore>, seed: u64) -> Report {
    let target = Target::new(
        store,
        Arc::new(MemoryLeases::new()),
        Domain::new("meta").unwrap(),
    );
    let run = engine::run(&profile(seed), &target).await;
    check(&run.history)
}

/// Runs `torture` on seeds 1..=5 until `property` is caught (a defect that needs a race may
/// need a few seeds to show; every catch is printed with its seed).
async fn caught<F: std::future::Future<Output = Report>>(
    defect: &str,
    property: Property,
    torture: impl Fn(u64) -> F,
) {
    for seed in 1..=5 {
        let report = torture(seed).await;
        if report.violated().contains(&property) {
            println!(
                "{defect} caught with seed {seed}: {:?}\n{}",
                report.violated(),
                report.violations[0]
            );
            return;
        }
    }
    panic!("{defect}: {property:?} never caught in seeds 1..=5");
}

/// Runs `torture` on seeds 1..=5: every run holds, fences someone, accepts something and
/// checks all 12 windows.
async fn holds<F: std::future::Future<Output = Report>>(torture: impl Fn(u64) -> F) {
    for seed in 1..=5 {
        let report = torture(seed).await;
        assert!(
            report.holds(),
            "seed {seed}: {}",
            report
                .violations
                .iter()
                .map(ToString::to_string)
                .collect::<String>()
        );
        assert!(
            report.fenced > 0 && report.accepted > 0 && report.windows_checked == 12,
            "seed {seed}: {report:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_broken_store_is_caught() {
    let expected = [
        (Defect::CheckThenWrite, Property::StaleAccepted),
        (Defect::DropsWrites, Property::LostWrite),
        (Defect::ForgetsOnRestart, Property::MarkDecreased),
        (Defect::RefusesEqual, Property::WrongRefusal),
        (Defect::StaleReads, Property::LostWrite),
    ];
    for (defect, property) in expected {
        caught(&format!("{defect:?}"), property, |seed| {
            torture(Arc::new(Broken::new(defect)), seed)
        })
        .await;
    }
}

/// A defect the linearizability search sees where no other property does: every run that
/// catches it catches it there, and some run catches it there alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_torn_read_is_caught_by_linearizability_alone() {
    let mut alone = Vec::new();
    for seed in 1..=5 {
        let report = torture(Arc::new(Broken::new(Defect::TornReads)), seed).await;
        let violated = report.violated();
        if violated.is_empty() {
            continue;
        }
        assert!(
            violated.contains(&Property::NotLinearizable),
            "seed {seed}: caught without the search: {}",
            report.violations[0]
        );
        if violated.len() == 1 {
            alone.push(seed);
        }
    }
    assert!(
        !alone.is_empty(),
        "no run in seeds 1..=5 was caught by linearizability alone"
    );
    println!("torn reads caught by linearizability alone with seeds {alone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_fence_holds_under_the_same_runs() {
    holds(|seed| torture(Arc::new(MemoryFence::new()), seed)).await;
}

/// How a log is broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LogDefect {
    /// Checks the mark, yields, then appends: a stale batch lands after a newer one.
    CheckThenAppend,
    /// Answers "fenced" to a stale batch but commits it anyway (an aborted batch shown to
    /// read_committed readers).
    LeaksFenced,
    /// Acknowledges every fourth batch without committing it.
    DropsBatches,
    /// Commits only the first record of every third batch (a torn transaction).
    TearsBatches,
}

/// A fenced log with the defect; otherwise the acceptance rule, same-owner policy.
#[derive(Debug)]
struct BrokenLog {
    defect: LogDefect,
    state: Mutex<(Option<FencingToken>, Vec<LogEntry>)>,
    appends: AtomicU64,
}

impl BrokenLog {
    fn new(defect: LogDefect) -> Self {
        BrokenLog {
            defect,
            state: Mutex::new((None, Vec::new())),
            appends: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl Fence for BrokenLog {
    fn backend(&self) -> &'static str {
        "broken-log"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::log()
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        let mut state = self.state.lock().unwrap();
        let previous = state.0;
        if let Some(current) = previous.filter(|&m| token < m) {
            return Err(Broken::fenced(domain, token, current));
        }
        state.0 = Some(token);
        Ok(Claimed::new(token, previous))
    }

    async fn high_water_mark(&self, _domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.state.lock().unwrap().0)
    }
}

#[async_trait]
impl FencedLog for BrokenLog {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        let n = self.appends.fetch_add(1, Ordering::Relaxed) + 1;
        let (domain, token) = (request.domain(), request.token());
        let seen = self.state.lock().unwrap().0;
        if self.defect == LogDefect::CheckThenAppend {
            if let Some(current) = seen.filter(|&m| token < m) {
                return Err(Broken::fenced(domain, token, current));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let mut state = self.state.lock().unwrap();
        let previous = if self.defect == LogDefect::CheckThenAppend {
            seen
        } else {
            state.0
        };
        let records: Vec<LogEntry> = request
            .records()
            .iter()
            .map(|r| LogEntry::new(token, request.op_id().cloned(), r.clone()))
            .collect();
        if let Some(current) = state.0.filter(|&m| token < m) {
            if self.defect == LogDefect::LeaksFenced {
                state.1.extend(records.iter().cloned());
            }
            if self.defect != LogDefect::CheckThenAppend {
                return Err(Broken::fenced(domain, token, current));
            }
        }
        let appended = Appended::new(token, records.len(), previous);
        match self.defect {
            LogDefect::DropsBatches if n.is_multiple_of(4) => {}
            LogDefect::TearsBatches if n.is_multiple_of(3) => {
                state.1.extend(records.into_iter().take(1));
            }
            _ => state.1.extend(records),
        }
        state.0 = Some(token.max(state.0.unwrap_or(token)));
        if self.defect == LogDefect::CheckThenAppend {
            state.0 = Some(token);
        }
        Ok(AppendOutcome::Appended(appended))
    }

    async fn read_log(&self, _domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        Ok(self.state.lock().unwrap().1.clone())
    }
}

async fn torture_log(log: Arc<dyn FencedLog>, seed: u64) -> Report {
    let target = Target::log(
        log,
        Arc::new(MemoryLeases::new()),
        Domain::new("meta-log").unwrap(),
    );
    let run = engine::run(&profile(seed), &target).await;
    check(&run.history)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_broken_log_is_caught() {
    let expected = [
        (LogDefect::CheckThenAppend, Property::LogOrder),
        (LogDefect::LeaksFenced, Property::FencedVisible),
        (LogDefect::DropsBatches, Property::LostWrite),
        (LogDefect::TearsBatches, Property::LogOrder),
    ];
    for (defect, property) in expected {
        caught(&format!("{defect:?}"), property, |seed| {
            torture_log(Arc::new(BrokenLog::new(defect)), seed)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_log_holds_under_the_same_runs() {
    holds(|seed| torture_log(Arc::new(MemoryFence::new()), seed)).await;
}

/// A correct store and log with a flaky network: every 5th write or append applies and then
/// loses its answer, every 7th is lost before it applies (both answered ambiguous). The runs
/// must still hold: this exercises the checker's resolution of ambiguity (retries with the op
/// id, reads of the value, the final log) rather than its verdict on clean answers.
#[derive(Debug)]
struct Flaky {
    inner: MemoryFence,
    calls: AtomicU64,
}

impl Flaky {
    fn new() -> Self {
        Flaky {
            inner: MemoryFence::new(),
            calls: AtomicU64::new(0),
        }
    }

    /// `None`: run the call; `Some(true)`: run it, then lose the answer; `Some(false)`: lose it.
    fn fate(&self) -> Option<bool> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(5) {
            Some(true)
        } else if n.is_multiple_of(7) {
            Some(false)
        } else {
            None
        }
    }

    /// Runs `call` (or not) as its fate says; a lost answer is ambiguous.
    async fn through<T>(
        &self,
        domain: &Domain,
        operation: fence_core::Operation,
        call: impl std::future::Future<Output = Result<T, FenceError>>,
    ) -> Result<T, FenceError> {
        let lost = || FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: "the answer was lost".into(),
        };
        match self.fate() {
            // Never polled: the request never reached the store.
            Some(false) => Err(lost()),
            Some(true) => call.await.and_then(|_| Err(lost())),
            None => call.await,
        }
    }
}

#[async_trait]
impl Fence for Flaky {
    fn backend(&self) -> &'static str {
        "flaky"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.inner.claim(domain, token).await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        self.inner.high_water_mark(domain).await
    }
}

#[async_trait]
impl FencedStore for Flaky {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let write = self.inner.write(request);
        self.through(request.domain(), fence_core::Operation::Write, write)
            .await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.inner.read(domain).await
    }
}

#[async_trait]
impl FencedLog for Flaky {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        let append = self.inner.append(request);
        self.through(request.domain(), fence_core::Operation::Append, append)
            .await
    }

    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        self.inner.read_log(domain).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_correct_store_with_lost_answers_holds_and_its_ambiguities_are_resolved() {
    for seed in 1..=2 {
        for log in [false, true] {
            let report = if log {
                torture_log(Arc::new(Flaky::new()), seed).await
            } else {
                torture(Arc::new(Flaky::new()), seed).await
            };
            let shown: String = report.violations.iter().map(ToString::to_string).collect();
            assert!(report.holds(), "seed {seed} log {log}: {shown}");
            let a = report.ambiguity;
            assert!(
                a.total > 0 && a.applied > 0 && a.not_applied > 0,
                "seed {seed} log {log}: {a:?}"
            );
        }
    }
}
