//! Every operation is counted with its outcome through the `metrics` facade.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use fence_core::{
    Domain, Fence, FenceError, FencedStore, FencingToken, LeaseManager, MemoryFence, MemoryIssuer,
    MemoryLeases, Observed, OwnerId, Rebase, Rebaser, Retirer, TokenIssuer, WriteRequest,
};
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

#[derive(Default)]
struct Counting {
    counters: Mutex<BTreeMap<String, Arc<Count>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
}

/// A histogram's recorded values.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(value);
    }
}

fn name_of(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

#[derive(Default)]
struct Count(AtomicU64);

impl CounterFn for Count {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl Counting {
    fn get(&self, key: &str) -> u64 {
        let counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        counters.get(key).map_or(0, |c| c.0.load(Ordering::Relaxed))
    }

    fn samples(&self, key: &str) -> Vec<f64> {
        let histograms = self.histograms.lock().unwrap_or_else(|p| p.into_inner());
        histograms.get(key).map_or_else(Vec::new, |h| {
            h.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
        })
    }
}

impl Recorder for Counting {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        Counter::from_arc(counters.entry(name_of(key)).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap_or_else(|p| p.into_inner());
        Histogram::from_arc(histograms.entry(name_of(key)).or_default().clone())
    }
}

#[test]
fn operations_are_counted_by_outcome() -> Result<(), FenceError> {
    let recorder = Counting::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| {
            FenceError::backend("test", fence_core::BackendErrorKind::Unavailable, None, e)
        })?;
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let store = Observed::new(MemoryFence::new());
            let d = Domain::new("metrics")?;
            // The bare adapter reports nothing: telemetry is the layer's job alone.
            let bare = MemoryFence::new();
            bare.write(&WriteRequest::put(d.clone(), FencingToken::new(9)?, "x"))
                .await?;
            let (t1, t2) = (FencingToken::new(1)?, FencingToken::new(2)?);
            store
                .write(&WriteRequest::put(d.clone(), t2, "new"))
                .await?;
            let stale = store.write(&WriteRequest::put(d.clone(), t1, "old")).await;
            assert!(stale.is_err_and(|e| e.is_fenced()));
            store.write(&WriteRequest::delete(d.clone(), t2)).await?;
            store.claim(&d, t2).await?;
            let operator = OwnerId::new("ops")?;
            store
                .rebase(&d, &Rebase::new(t1, t2, operator.clone(), "INC-1")?)
                .await?;
            store.rebases(&d).await?;
            store.retire(&d).await?;
            Observed::new(MemoryIssuer::new()).issue(&d).await?;
            let leases = Observed::new(MemoryLeases::new());
            let lease = leases
                .acquire(&d, &operator, Duration::from_secs(5))
                .await?;
            leases.holder(&d).await?;
            leases.renew(&lease, Duration::from_secs(5)).await?;
            leases.release(&lease).await?;
            let zero_ttl = leases.acquire(&d, &operator, Duration::ZERO).await;
            assert!(matches!(zero_ttl, Err(FenceError::InvalidInput(_))));
            Ok::<_, FenceError>(())
        })
    })?;
    let count = |key: &str| recorder.get(key);
    assert_eq!(
        count("fence_writes_total{backend=memory,operation=write,outcome=accepted}"),
        1
    );
    assert_eq!(
        count("fence_writes_total{backend=memory,operation=write,outcome=fenced}"),
        1
    );
    assert_eq!(
        count("fence_writes_total{backend=memory,operation=delete,outcome=accepted}"),
        1
    );
    assert_eq!(
        count("fence_operations_total{backend=memory,operation=claim,outcome=accepted}"),
        1
    );
    for (operation, times) in [
        ("rebase", 1),
        ("rebases", 1),
        ("retire", 1),
        ("issue", 1),
        ("lease", 3),
        ("lease_holder", 1),
    ] {
        let key = format!(
            "fence_operations_total{{backend=memory,operation={operation},outcome=accepted}}"
        );
        assert_eq!(count(&key), times, "{key}");
    }
    assert_eq!(
        count("fence_operations_total{backend=memory,operation=lease,outcome=invalid_input}"),
        1
    );
    // One increment per operation: writes are not counted twice.
    assert_eq!(
        count("fence_operations_total{backend=memory,operation=write,outcome=fenced}"),
        0
    );
    // And one latency sample per operation, by outcome.
    let samples = |key: &str| recorder.samples(key);
    let accepted = samples(
        "fence_operation_duration_seconds{backend=memory,operation=write,outcome=accepted}",
    );
    assert_eq!(accepted.len(), 1);
    assert!(
        accepted.iter().all(|s| (0.0..1.0).contains(s)),
        "{accepted:?}"
    );
    for key in [
        "fence_operation_duration_seconds{backend=memory,operation=write,outcome=fenced}",
        "fence_operation_duration_seconds{backend=memory,operation=delete,outcome=accepted}",
        "fence_operation_duration_seconds{backend=memory,operation=claim,outcome=accepted}",
    ] {
        assert_eq!(samples(key).len(), 1, "{key}");
    }
    Ok(())
}
