//! The suite has teeth: stores that break one sentence of the contract each fail the scenario
//! written for that sentence, while the honest reference passes it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{store, Namespace, ScenarioResult, StoreHarness, Verdict};
use fence_core::{
    rule, Accepted, Capabilities, Claimed, Domain, Entry, EqualTokenPolicy, Fence, FenceError,
    FencedStore, FencingToken, Mutation, Revision, Snapshot, WriteOutcome, WriteRequest,
};

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
    /// Checks the token, releases the lock, then writes: check-in-the-client-then-write.
    CheckThenWrite,
    /// Revision conditions are ignored.
    IgnoresCondition,
}

#[derive(Default)]
struct State {
    hwm: Option<FencingToken>,
    entry: Option<(Option<fence_core::Bytes>, FencingToken, Revision)>,
}

struct Faulty {
    fault: Fault,
    domains: Mutex<HashMap<Domain, State>>,
}

impl fmt::Debug for Faulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faulty({:?})", self.fault)
    }
}

impl Faulty {
    fn with<R>(&self, d: &Domain, f: impl FnOnce(&mut State) -> R) -> R {
        let mut map = self.domains.lock().unwrap_or_else(|p| p.into_inner());
        f(map.entry(d.clone()).or_default())
    }
}

#[async_trait]
impl Fence for Faulty {
    fn backend(&self) -> &'static str {
        "faulty"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
    }

    async fn claim(&self, d: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.with(d, |s| {
            rule::check_claim(d, s.hwm, token)?;
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
        let policy = match (self.fault, r.policy()) {
            (Fault::IgnoresStrict, _) => EqualTokenPolicy::SameOwner,
            (_, policy) => policy,
        };
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
            if self.fault != Fault::CheckThenWrite {
                check(s)?;
            }
            let revision = s.entry.as_ref().map_or(Revision::new(1), |e| e.2.next());
            let value = match r.mutation() {
                Mutation::Put(v) => Some(v.clone()),
                _ => None,
            };
            let deleting = value.is_none();
            s.entry = Some((value, r.token(), revision));
            let accepted = Accepted::new(r.token(), revision, s.hwm);
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

struct Harness(Arc<Faulty>);

impl StoreHarness for Harness {
    fn store(&self) -> Arc<dyn FencedStore> {
        self.0.clone()
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

macro_rules! catches {
    ($test:ident, $fault:expr, $scenario:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $test() {
            let honest = run(Fault::None, |h, ns| $scenario(h, ns)).await;
            assert!(
                matches!(honest, Ok(Verdict::Passed)),
                "the honest store must pass: {honest:?}"
            );
            let faulty = run($fault, |h, ns| $scenario(h, ns)).await;
            assert!(
                faulty.is_err(),
                "{:?} went unnoticed by {}",
                $fault,
                stringify!($scenario)
            );
        }
    };
}

catches!(
    stale_tokens_are_caught,
    Fault::AcceptsStale,
    store::older_token_is_fenced
);
catches!(
    stale_tokens_caught_by_race,
    Fault::AcceptsStale,
    store::concurrent_writers_with_mixed_tokens
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
    ignored_strict_policy_caught_by_race,
    Fault::IgnoresStrict,
    store::concurrent_strict_writers_one_winner_per_token
);
catches!(
    ignored_claim_is_caught,
    Fault::ClaimIgnored,
    store::claim_fences_before_first_write
);
catches!(
    ignored_condition_is_caught,
    Fault::IgnoresCondition,
    store::revision_condition_is_checked
);

/// Check-then-write is caught by the races. It is a race, so it gets a few runs to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_then_write_is_caught_by_the_races() {
    let mut caught = 0;
    for _ in 0..5 {
        let mixed = run(Fault::CheckThenWrite, |h, ns| {
            store::concurrent_writers_with_mixed_tokens(h, ns)
        })
        .await;
        let strict = run(Fault::CheckThenWrite, |h, ns| {
            store::concurrent_strict_writers_one_winner_per_token(h, ns)
        })
        .await;
        caught += usize::from(mixed.is_err()) + usize::from(strict.is_err());
    }
    assert!(
        caught > 0,
        "10 racing runs against check-then-write all passed"
    );
    eprintln!("check-then-write caught in {caught} of 10 racing runs");
}
