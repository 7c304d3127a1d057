//! The torture engine: workers take leases from a real issuer and write, delete, claim and read
//! one domain through a fenced store (or append to, claim and read a fenced log), in windows that each start with no operation in flight,
//! with seeded pauses past the lease's expiry (a frozen worker wakes up and writes with its old
//! token, as a zombie does). Every operation and answer goes into a [`History`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_core::{
    AppendRequest, Backoff, Domain, Entry, Fence, FenceError, FencedLog, FencedStore, FencingToken,
    LeaseManager, OperationId, OwnerId, Record, WriteOutcome, WriteRequest,
};
use tokio::sync::{watch, Barrier};

use crate::faults::{FaultKind, Faults};
use crate::history::{Event, History, LoggedRecord, Op, Outcome, SeenEntry};
use fence_conformance::seeded::Rng;

/// How often the reads after the run compare the log and the mark before giving up.
const MAX_FINAL_READS: u32 = 6;
/// How long an ambiguous write is retried with its operation id before it is left unresolved:
/// the six retries before (about 20 s when every attempt waits out its 3 s timeout) ran out on
/// CI; a minute outlasts a server's restart under load, so the write is resolved once it is back.
const RETRY_DEADLINE: Duration = Duration::from_secs(60);
/// How long the reads after the run keep trying.
const FINAL_READ_DEADLINE: Duration = Duration::from_secs(30);
/// The wait between those retries.
const RETRY_BACKOFF: Backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(400));

/// The shape of a run: how many workers, windows and operations, and how often they pause.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Profile {
    /// The seed every random choice comes from (printed with every failure).
    pub seed: u64,
    /// Concurrent workers.
    pub workers: usize,
    /// Windows; every worker runs `operations_per_window` operations in each.
    pub windows: u32,
    /// Operations per worker per window.
    pub operations_per_window: usize,
    /// The lease each worker takes.
    pub lease_ttl: Duration,
    /// Per operation, the chance a worker freezes for longer than its lease first.
    pub pause_probability: f64,
    /// Per operation, the chance a worker tries to take the lease first.
    pub acquire_probability: f64,
    /// The gap between the end of one injected fault and the start of the next (each drawn
    /// from this range); `None`: no faults besides pauses.
    pub fault_gap: Option<(Duration, Duration)>,
    /// How long each injected fault lasts (drawn from this range).
    pub fault_length: (Duration, Duration),
    /// The caller's deadline on one operation: a write or claim still unanswered then is
    /// ambiguous (as a caller that gives up must treat it), a read failed.
    pub operation_timeout: Duration,
}

impl Profile {
    /// A profile of `workers` × `windows` × `operations_per_window` with the given seed; pauses
    /// of 5 % and acquisitions of 20 % of operations, a 60 ms lease.
    pub fn new(seed: u64, workers: usize, windows: u32, operations_per_window: usize) -> Self {
        Profile {
            seed,
            workers,
            windows,
            operations_per_window,
            lease_ttl: Duration::from_millis(60),
            pause_probability: 0.05,
            acquire_probability: 0.2,
            fault_gap: None,
            fault_length: (Duration::from_millis(20), Duration::from_millis(150)),
            operation_timeout: Duration::from_secs(3),
        }
    }

    /// Injects the target's faults with gaps drawn from `gap` and lengths from `length`.
    pub fn faults(mut self, gap: (Duration, Duration), length: (Duration, Duration)) -> Self {
        self.fault_gap = Some(gap);
        self.fault_length = length;
        self
    }

    /// Sets the lease TTL.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets the chance of a pause past the lease before an operation.
    pub fn pause_probability(mut self, probability: f64) -> Self {
        self.pause_probability = probability;
        self
    }

    /// The operations a run of this profile makes (besides retries, each window's anchor read
    /// and the final reads).
    pub fn operations(&self) -> usize {
        self.workers * self.windows as usize * self.operations_per_window
    }
}

/// What a run injected, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Injected {
    /// Workers frozen past their lease's expiry.
    pub pauses: usize,
    /// Leases taken over (acquired while another worker believed it held the domain).
    pub acquisitions: usize,
    /// Retries of ambiguous operations with the same operation id.
    pub retries: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<FaultKind, usize>,
}

/// A finished run: the history and what was injected.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Run {
    /// The seed it ran with.
    pub seed: u64,
    /// Everything recorded.
    pub history: History,
    /// The faults injected.
    pub injected: Injected,
    /// Why the state could not be read after the run, when it could not.
    pub final_read_error: Option<String>,
}

impl Run {
    /// A run of `seed` that recorded `history` and injected nothing (for reports built from
    /// a recorded history).
    pub fn new(seed: u64, history: History) -> Self {
        Run {
            seed,
            history,
            injected: Injected::default(),
            final_read_error: None,
        }
    }
}

/// What a run's workers write to.
#[derive(Clone)]
#[non_exhaustive]
pub enum Subject {
    /// A fenced register: puts, deletes, claims and reads of one entry.
    Register(Arc<dyn FencedStore>),
    /// A fenced log: appends of batches, claims and reads of the mark; its committed records
    /// are read once after the run ([`History::final_log`]).
    Log(Arc<dyn FencedLog>),
}

impl Subject {
    fn fence(&self) -> &dyn Fence {
        match self {
            Subject::Register(store) => store.as_ref(),
            Subject::Log(log) => log.as_ref(),
        }
    }
}

/// The resource and the issuer a run drives.
#[derive(Clone)]
pub struct Target {
    /// The fenced store or log under test.
    pub subject: Subject,
    /// The lease backend that issues tokens.
    pub leases: Arc<dyn LeaseManager>,
    /// The domain every worker contends for.
    pub domain: Domain,
    /// What injects faults into the target, if anything.
    pub faults: Option<Arc<dyn Faults>>,
    /// The store may refuse a stale token from a client-side cache ([`History::refusals_from_cache`]).
    pub refusals_from_cache: bool,
    /// One client per worker (worker `i` uses entry `i % len`), as separate processes would
    /// hold; empty: every worker shares `subject`. The final read uses `subject`.
    pub per_worker: Vec<Subject>,
}

impl Target {
    /// A fenced register as the target, without injected faults (pauses only).
    pub fn new(store: Arc<dyn FencedStore>, leases: Arc<dyn LeaseManager>, domain: Domain) -> Self {
        Target::of(Subject::Register(store), leases, domain)
    }

    /// A fenced log as the target, without injected faults (pauses only).
    pub fn log(log: Arc<dyn FencedLog>, leases: Arc<dyn LeaseManager>, domain: Domain) -> Self {
        Target::of(Subject::Log(log), leases, domain)
    }

    fn of(subject: Subject, leases: Arc<dyn LeaseManager>, domain: Domain) -> Self {
        Target {
            subject,
            leases,
            domain,
            faults: None,
            refusals_from_cache: false,
            per_worker: Vec::new(),
        }
    }

    /// Gives each worker its own client of the same resource (worker `i` uses `clients[i %
    /// len]`), so that fencing between them happens at the resource, not inside one client.
    pub fn with_clients_per_worker(mut self, clients: Vec<Subject>) -> Self {
        self.per_worker = clients;
        self
    }

    /// The client worker `worker` uses.
    fn subject_of(&self, worker: usize) -> &Subject {
        match self.per_worker.len() {
            0 => &self.subject,
            n => &self.per_worker[worker % n],
        }
    }

    /// Declares that the store may refuse from a client-side cache (fence-s3).
    pub fn with_refusals_from_cache(mut self) -> Self {
        self.refusals_from_cache = true;
        self
    }

    /// Injects faults through `faults` while the workers run.
    pub fn with_faults(mut self, faults: Arc<dyn Faults>) -> Self {
        self.faults = Some(faults);
        self
    }
}

/// Injects faults until `stop` turns true, then heals the last one; returns the counts.
async fn inject_faults(
    faults: Arc<dyn Faults>,
    profile: Profile,
    mut stop: watch::Receiver<bool>,
) -> BTreeMap<FaultKind, usize> {
    let mut counts = BTreeMap::new();
    let kinds = faults.kinds();
    let (Some(gap), false) = (profile.fault_gap, kinds.is_empty()) else {
        return counts;
    };
    let mut rng = Rng::new(profile.seed.rotate_left(29) ^ 0xFA17);
    loop {
        let wait = rng.between(gap.0, gap.1);
        if tokio::time::timeout(wait, stop.wait_for(|s| *s))
            .await
            .is_ok()
        {
            return counts;
        }
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        *counts.entry(kind).or_insert(0) += 1;
        faults.inject(kind).await;
        let length = rng.between(profile.fault_length.0, profile.fault_length.1);
        let stopped = tokio::time::timeout(length, stop.wait_for(|s| *s))
            .await
            .is_ok();
        faults.heal(kind).await;
        if stopped {
            return counts;
        }
    }
}

/// Runs `profile` against `target`.
pub async fn run(profile: &Profile, target: &Target) -> Run {
    let started = Instant::now();
    let barrier = Arc::new(Barrier::new(profile.workers));
    let mut tasks = Vec::with_capacity(profile.workers);
    let mut run = Run {
        seed: profile.seed,
        history: History {
            refusals_from_cache: target.refusals_from_cache,
            ..History::default()
        },
        injected: Injected::default(),
        final_read_error: None,
    };
    let (stop, stopped) = watch::channel(false);
    let injector = target
        .faults
        .clone()
        .map(|faults| tokio::spawn(inject_faults(faults, profile.clone(), stopped)));
    for worker in 0..profile.workers {
        let owner = match OwnerId::new(format!("torture-worker-{worker}")) {
            Ok(owner) => owner,
            Err(error) => {
                run.history
                    .events
                    .push(died(format!("no owner id: {error}")));
                return run;
            }
        };
        let (profile, target, barrier) = (profile.clone(), target.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            Worker::new(worker, owner, &profile, started)
                .run(&profile, &target, &barrier)
                .await
        }));
    }
    for task in tasks {
        match task.await {
            Ok((events, injected)) => {
                run.history.events.extend(events);
                run.injected.pauses += injected.pauses;
                run.injected.acquisitions += injected.acquisitions;
                run.injected.retries += injected.retries;
            }
            Err(error) => run
                .history
                .events
                .push(died(format!("a worker task died: {error}"))),
        }
    }
    stop.send_replace(true);
    if let Some(injector) = injector {
        run.injected.faults = injector.await.unwrap_or_default();
    }
    run.history.events.sort_by_key(|e| (e.invoked, e.worker));
    // A request a worker gave up on may still be on its way (a paused server holds it until
    // healed): let it land before the state is read.
    if run
        .history
        .events
        .iter()
        .any(|e| e.outcome == Outcome::Ambiguous)
    {
        tokio::time::sleep(profile.operation_timeout).await;
    }
    match &target.subject {
        Subject::Register(_) => match final_read(&target.subject, &target.domain).await {
            Ok(state) => run.history.final_state = Some(state),
            Err(error) => run.final_read_error = Some(error.to_string()),
        },
        Subject::Log(log) => match settled_log(&target.subject, &**log, &target.domain).await {
            Ok((mark, log)) => {
                run.history.final_state = Some(mark);
                run.history.final_log = Some(log);
            }
            Err(error) => run.final_read_error = Some(error.to_string()),
        },
    }
    run
}

/// A log's mark and records read at one moment: the records, the mark, the records again,
/// until both reads of the records agree (a late commit between them would pair a mark with a
/// log it does not belong to).
async fn settled_log(
    subject: &Subject,
    log: &dyn FencedLog,
    domain: &Domain,
) -> Result<((Option<u64>, SeenEntry), Vec<LoggedRecord>), String> {
    let mut before = final_log(log, domain).await.map_err(|e| e.to_string())?;
    for _ in 0..MAX_FINAL_READS {
        let mark = final_read(subject, domain)
            .await
            .map_err(|e| e.to_string())?;
        let after = final_log(log, domain).await.map_err(|e| e.to_string())?;
        if after == before {
            return Ok((mark, after));
        }
        before = after;
        tokio::time::sleep(RETRY_BACKOFF.delay(0)).await;
    }
    Err(format!(
        "the log changed between every pair of reads ({MAX_FINAL_READS} tries)"
    ))
}

/// A worker that could not run: recorded so the run's report shows it.
fn died(reason: String) -> Event {
    Event {
        worker: usize::MAX,
        window: u32::MAX,
        op: Op::Read,
        invoked: 0,
        completed: 0,
        outcome: Outcome::Failed(reason),
    }
}

/// Retries `read` while it fails retryably or gets no answer, for up to [`FINAL_READ_DEADLINE`]:
/// the reads after the run, once the faults are healed, while the server may still be coming
/// back from a last restart (a Redis Cluster whose masters all restarted takes seconds to
/// serve again on a loaded machine).
async fn retried<T, F: std::future::Future<Output = Result<T, FenceError>>>(
    read: impl Fn() -> F,
) -> Result<T, FenceError> {
    let deadline = Instant::now() + FINAL_READ_DEADLINE;
    let mut attempt = 0;
    loop {
        let answer = tokio::time::timeout(Duration::from_secs(5), read()).await;
        match answer {
            Ok(Err(error)) if !error.is_retryable() => return Err(error),
            Ok(Err(error)) if Instant::now() >= deadline => return Err(error),
            Ok(result @ Ok(_)) => return result,
            Err(_) if Instant::now() >= deadline => {
                return Err(FenceError::backend(
                    "torture",
                    fence_core::BackendErrorKind::Unavailable,
                    None,
                    format!("no answer to the final read within {FINAL_READ_DEADLINE:?}"),
                ))
            }
            _ => {
                tokio::time::sleep(RETRY_BACKOFF.delay(attempt)).await;
                attempt = attempt.saturating_add(1);
            }
        }
    }
}

/// The mark and entry after the run.
async fn final_read(
    subject: &Subject,
    domain: &Domain,
) -> Result<(Option<u64>, SeenEntry), FenceError> {
    retried(|| read(subject, domain)).await
}

/// A log's committed records after the run, values decoded as the workers wrote them.
async fn final_log(log: &dyn FencedLog, domain: &Domain) -> Result<Vec<LoggedRecord>, FenceError> {
    let entries = retried(|| log.read_log(domain)).await?;
    Ok(entries
        .iter()
        .map(|e| LoggedRecord {
            token: e.token.get(),
            value: unique_id(&e.record.value),
        })
        .collect())
}

/// A value as the workers wrote it: the decimal text of its unique id (`u64::MAX`: foreign).
fn unique_id(bytes: &[u8]) -> u64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// The mark and the entry (a log has no entry: absent).
async fn read(subject: &Subject, domain: &Domain) -> Result<(Option<u64>, SeenEntry), FenceError> {
    match subject {
        Subject::Register(store) => {
            let snapshot = store.read(domain).await?;
            Ok((
                snapshot.high_water_mark.map(FencingToken::get),
                seen(&snapshot.entry),
            ))
        }
        Subject::Log(log) => Ok((
            log.high_water_mark(domain).await?.map(FencingToken::get),
            SeenEntry::Absent,
        )),
    }
}

/// The entry as the history records it: values are the decimal text of their unique id.
fn seen(entry: &Entry) -> SeenEntry {
    match entry {
        Entry::Value {
            value,
            token,
            revision,
        } => SeenEntry::Value {
            value: unique_id(value),
            token: token.get(),
            revision: revision.get(),
        },
        Entry::Tombstone { token, revision } => SeenEntry::Tombstone {
            token: token.get(),
            revision: revision.get(),
        },
        _ => SeenEntry::Absent,
    }
}

struct Worker {
    id: usize,
    rng: Rng,
    owner: OwnerId,
    /// The token this worker believes it holds (it keeps writing with it after losing the lease).
    token: Option<FencingToken>,
    started: Instant,
    counter: u64,
    events: Vec<Event>,
    injected: Injected,
}

impl Worker {
    fn new(id: usize, owner: OwnerId, profile: &Profile, started: Instant) -> Self {
        Worker {
            id,
            rng: Rng::new(profile.seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            owner,
            token: None,
            started,
            counter: 0,
            events: Vec::new(),
            injected: Injected::default(),
        }
    }

    fn now(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    async fn run(
        mut self,
        profile: &Profile,
        target: &Target,
        barrier: &Barrier,
    ) -> (Vec<Event>, Injected) {
        for window in 0..profile.windows {
            barrier.wait().await;
            // The window's anchor: one read before any other operation of the window, so the
            // checker can start a window from a known state (after one it could not search).
            if self.id == 0 {
                self.record(target, window, Op::Read, profile.operation_timeout)
                    .await;
            }
            barrier.wait().await;
            for _ in 0..profile.operations_per_window {
                self.step(profile, target, window).await;
            }
        }
        (self.events, self.injected)
    }

    async fn step(&mut self, profile: &Profile, target: &Target, window: u32) {
        if self.token.is_none() || self.rng.chance(profile.acquire_probability) {
            let acquired = tokio::time::timeout(
                profile.operation_timeout,
                target
                    .leases
                    .acquire(&target.domain, &self.owner, profile.lease_ttl),
            );
            if let Ok(Ok(lease)) = acquired.await {
                self.injected.acquisitions += 1;
                self.token = Some(lease.token);
                // A new owner claims at once, so stale holders are fenced before its writes.
                let claim = Op::Claim {
                    token: lease.token.get(),
                };
                self.record(target, window, claim, profile.operation_timeout)
                    .await;
                return;
            }
        }
        if self.rng.chance(profile.pause_probability) {
            self.injected.pauses += 1;
            tokio::time::sleep(profile.lease_ttl.mul_f64(1.5)).await;
        }
        let Some(token) = self.token else {
            self.record(target, window, Op::Read, profile.operation_timeout)
                .await;
            return;
        };
        self.counter += 1;
        let op = if let Subject::Log(_) = target.subject {
            self.log_op(token.get())
        } else {
            self.register_op(token.get())
        };
        let mut outcome = self
            .record(target, window, op.clone(), profile.operation_timeout)
            .await;
        let mut attempt = 0;
        let first = Instant::now();
        let resolvable = matches!(
            op,
            Op::Write { op_id: Some(_), .. } | Op::Append { op_id: Some(_), .. }
        );
        // Resolve an ambiguous write the way a caller should: retry with the same operation id
        // until an answer settles it.
        while resolvable
            && first.elapsed() < RETRY_DEADLINE
            && match outcome {
                Outcome::Ambiguous => true,
                // A retry that failed did not apply, but says nothing of the first attempt
                // (the server may still be restarting): keep trying.
                Outcome::Failed(_) => attempt > 0,
                _ => false,
            }
        {
            tokio::time::sleep(RETRY_BACKOFF.delay(attempt)).await;
            attempt += 1;
            self.injected.retries += 1;
            outcome = self
                .record(target, window, op.clone(), profile.operation_timeout)
                .await;
        }
    }

    /// A register's next operation: mostly puts, some deletes, claims and reads.
    fn register_op(&mut self, token: u64) -> Op {
        match self.rng.below(10) {
            0..=5 => Op::Write {
                token,
                value: Some(((self.id as u64) << 32) | self.counter),
                op_id: Some(self.op_id()),
            },
            6 => Op::Write {
                token,
                value: None,
                op_id: Some(self.op_id()),
            },
            7 => Op::Claim { token },
            _ => Op::Read,
        }
    }

    /// A log's next operation: mostly appends of one to three records, some claims and reads.
    fn log_op(&mut self, token: u64) -> Op {
        match self.rng.below(10) {
            0..=6 => {
                let base = (((self.id as u64) << 32) | self.counter) << 2;
                Op::Append {
                    token,
                    values: (0..=self.rng.below(3)).map(|k| base | k).collect(),
                    op_id: Some(self.op_id()),
                }
            }
            7 => Op::Claim { token },
            _ => Op::Read,
        }
    }

    /// The operation id of this worker's current operation.
    fn op_id(&self) -> String {
        format!("w{}-{}", self.id, self.counter)
    }

    async fn record(&mut self, target: &Target, window: u32, op: Op, timeout: Duration) -> Outcome {
        let invoked = self.now();
        let subject = target.subject_of(self.id);
        let executed = tokio::time::timeout(timeout, execute(subject, &target.domain, &op));
        let outcome = match executed.await {
            Ok(outcome) => outcome,
            Err(_) if op == Op::Read => Outcome::Failed(format!("no answer within {timeout:?}")),
            Err(_) => Outcome::Ambiguous,
        };
        self.events.push(Event {
            worker: self.id,
            window,
            op,
            invoked,
            completed: self.now(),
            outcome: outcome.clone(),
        });
        outcome
    }
}

/// Runs one operation and records what the resource answered.
pub(crate) async fn execute(subject: &Subject, domain: &Domain, op: &Op) -> Outcome {
    if *op == Op::Read {
        // A read changes nothing: one that gets no answer simply failed.
        return match read(subject, domain).await {
            Ok((mark, entry)) => Outcome::Read { mark, entry },
            Err(error) => Outcome::Failed(error.to_string()),
        };
    }
    let result = match (op.token().map(FencingToken::new), op_id(op)) {
        (Some(Ok(token)), Ok(op_id)) => match (subject, op) {
            (_, Op::Claim { .. }) => {
                subject
                    .fence()
                    .claim(domain, token)
                    .await
                    .map(|claimed| Outcome::Claimed {
                        previous: claimed.previous_high_water_mark.map(FencingToken::get),
                    })
            }
            (Subject::Register(store), Op::Write { value, .. }) => {
                let request = match value {
                    Some(value) => WriteRequest::put(domain.clone(), token, value.to_string()),
                    None => WriteRequest::delete(domain.clone(), token),
                };
                let request = match op_id {
                    Some(op) => request.with_op_id(op),
                    None => request,
                };
                store.write(&request).await.map(|outcome| {
                    let accepted = outcome.accepted();
                    let (revision, previous) = (
                        accepted.revision.get(),
                        accepted.previous_high_water_mark.map(FencingToken::get),
                    );
                    match outcome {
                        WriteOutcome::Duplicate(_) => Outcome::Duplicate { revision, previous },
                        _ => Outcome::Written { revision, previous },
                    }
                })
            }
            (Subject::Log(log), Op::Append { values, .. }) => {
                let records = values.iter().map(|v| Record::new(v.to_string())).collect();
                let request = AppendRequest::new(domain.clone(), token, records);
                let request = match op_id {
                    Some(op) => request.with_op_id(op),
                    None => request,
                };
                log.append(&request).await.map(|outcome| Outcome::Appended {
                    previous: outcome
                        .appended()
                        .previous_high_water_mark
                        .map(FencingToken::get),
                    duplicate: outcome.is_duplicate(),
                })
            }
            _ => return Outcome::Failed(format!("{op:?} does not apply to this target")),
        },
        (Some(Err(error)), _) => Err(error.into()),
        (_, Err(error)) => Err(error.into()),
        (None, _) => return Outcome::Failed(format!("{op:?} carries no token")),
    };
    result.unwrap_or_else(|error| failure(&error))
}

/// The operation id a write or append carries.
fn op_id(op: &Op) -> Result<Option<OperationId>, fence_core::InvalidInput> {
    match op {
        Op::Write { op_id, .. } | Op::Append { op_id, .. } => {
            op_id.as_deref().map(OperationId::new).transpose()
        }
        _ => Ok(None),
    }
}

/// An error as the history records it: refused as stale, ambiguous, or failed without applying.
fn failure(error: &FenceError) -> Outcome {
    match error {
        FenceError::Fenced { current, .. } => Outcome::Fenced {
            current: current.get(),
        },
        FenceError::Ambiguous { .. } => Outcome::Ambiguous,
        // Errors that do not say the request never ran may have applied: ambiguous, never
        // guessed as failed.
        FenceError::Backend { .. } if error.is_retryable() => Outcome::Ambiguous,
        other => Outcome::Failed(other.to_string()),
    }
}
