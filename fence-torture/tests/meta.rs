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
    Accepted, Capabilities, Claimed, Domain, Entry, Fence, FenceError, FencedStore, FencingToken,
    MemoryFence, MemoryLeases, Mutation, Revision, Snapshot, WriteOutcome, WriteRequest,
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
}

/// A register with the defect; otherwise the acceptance rule, same-owner policy.
#[derive(Debug)]
struct Broken {
    defect: Defect,
    state: Mutex<HashMap<Domain, Snapshot>>,
    lagging: Mutex<HashMap<Domain, Snapshot>>,
    calls: AtomicU64,
}

impl Broken {
    fn new(defect: Defect) -> Self {
        Broken {
            defect,
            state: Mutex::new(HashMap::new()),
            lagging: Mutex::new(HashMap::new()),
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
}

#[async_trait]
impl Fence for Broken {
    fn backend(&self) -> &'static str {
        "broken"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
    }

    async fn do_claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
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

    async fn do_high_water_mark(
        &self,
        domain: &Domain,
    ) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.snapshot(domain).high_water_mark)
    }
}

#[async_trait]
impl FencedStore for Broken {
    async fn do_write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let n = self.call();
        let (domain, token) = (request.domain(), request.token());
        let before = self.snapshot(domain);
        if self.defect == Defect::CheckThenWrite {
            self.admit(domain, token, before.high_water_mark)?;
            // The gap between the check and the write, where another writer gets in.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
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
            return Ok(WriteOutcome::Accepted(accepted));
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
        Ok(WriteOutcome::Accepted(accepted))
    }

    async fn do_read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.call();
        if self.defect == Defect::StaleReads {
            if let Some(lagging) = self.lagging.lock().unwrap().get(domain) {
                return Ok(lagging.clone());
            }
        }
        Ok(self.snapshot(domain))
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
        let mut caught = None;
        // A defect that needs a race may need a few seeds to show; every seed is printed.
        for seed in 1..=5 {
            let report = torture(Arc::new(Broken::new(defect)), seed).await;
            if report.violated().contains(&property) {
                caught = Some((seed, report));
                break;
            }
        }
        let (seed, report) = caught
            .unwrap_or_else(|| panic!("{defect:?}: {property:?} never caught in seeds 1..=5"));
        println!(
            "{defect:?} caught with seed {seed}: {:?}\n{}",
            report.violated(),
            report.violations[0]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_fence_holds_under_the_same_runs() {
    for seed in 1..=5 {
        let report = torture(Arc::new(MemoryFence::new()), seed).await;
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
            report.fenced > 0,
            "seed {seed}: the run fenced nobody: {report:?}"
        );
        assert!(
            report.accepted > 0 && report.windows_checked == 12,
            "seed {seed}: {report:?}"
        );
    }
}
