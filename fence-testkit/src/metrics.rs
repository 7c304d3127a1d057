//! A `metrics` recorder that keeps every counter, gauge and histogram sample by its full key
//! (`name{label=value,...}`, labels in the order given), for tests of what an operation
//! reports; [`recording`] runs a test's future with it installed.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Runs `test` to completion on a fresh current-thread runtime (I/O and timers on) with
/// `recorder` installed as this thread's recorder: everything the future and the tasks it
/// spawns record goes to `recorder`.
pub fn recording<T>(recorder: &CountingRecorder, test: impl Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    metrics::with_local_recorder(recorder, || runtime.block_on(test))
}

/// Keeps what is recorded through it; see the module docs.
#[derive(Default)]
pub struct CountingRecorder {
    counters: Mutex<BTreeMap<String, Arc<Count>>>,
    gauges: Mutex<BTreeMap<String, Arc<Level>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
}

impl CountingRecorder {
    /// The counter `key` (`name{label=value,...}`), 0 when never incremented.
    pub fn count(&self, key: &str) -> u64 {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters.get(key).map_or(0, |c| c.0.load(Ordering::Relaxed))
    }

    /// The gauge `key`'s last value, `None` when never set.
    pub fn gauge(&self, key: &str) -> Option<f64> {
        let gauges = self.gauges.lock().unwrap_or_else(PoisonError::into_inner);
        gauges
            .get(key)
            .and_then(|g| *g.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The histogram `key`'s samples, in the order recorded.
    pub fn samples(&self, key: &str) -> Vec<f64> {
        let histograms = self
            .histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        histograms.get(key).map_or_else(Vec::new, |h| {
            h.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
        })
    }

    /// Every key with a non-zero counter, for a failing test's message.
    pub fn counted(&self) -> Vec<String> {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters
            .iter()
            .filter(|(_, c)| c.0.load(Ordering::Relaxed) > 0)
            .map(|(k, c)| format!("{k} = {}", c.0.load(Ordering::Relaxed)))
            .collect()
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

#[derive(Default)]
struct Level(Mutex<Option<f64>>);

impl GaugeFn for Level {
    fn increment(&self, value: f64) {
        let mut level = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *level = Some(level.unwrap_or(0.0) + value);
    }

    fn decrement(&self, value: f64) {
        self.increment(-value);
    }

    fn set(&self, value: f64) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
    }
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(value);
    }
}

impl Recorder for CountingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        Counter::from_arc(counters.entry(name_of(key)).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap_or_else(PoisonError::into_inner);
        Gauge::from_arc(gauges.entry(name_of(key)).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self
            .histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Histogram::from_arc(histograms.entry(name_of(key)).or_default().clone())
    }
}
