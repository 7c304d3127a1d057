//! Spans and counters shared by every adapter, so all backends report alike: what
//! [`crate::Observed`] runs around each operation (its docs name the metrics), and what an
//! adapter's own extensions run through [`observe`].
//!
//! Metric handles are registered once per (backend, operation, outcome) and thread, then
//! reused, so an operation allocates nothing for its telemetry. A handle is registered again
//! when the thread sees another recorder, and when it went unused for a second (recorders that
//! drop idle metrics, such as the Prometheus exporter's `idle_timeout`, would otherwise be fed
//! through a handle they forgot). Still, **install the recorder (or the local recorder) before
//! the first fenced operation**, as the `metrics` crate advises. A span is created only when a
//! `tracing` subscriber wants `debug` spans of this crate.

use std::cell::RefCell;
use std::future::Future;
use std::time::{Duration, Instant};

use metrics::{Counter, Histogram, Recorder};
use tracing::Instrument;

use crate::{Domain, FenceError, FencingToken, Operation};

/// A success value that names its metric outcome label.
pub trait OutcomeLabel {
    /// `accepted`, `duplicate`, …
    fn outcome_label(&self) -> &'static str;
}

macro_rules! accepted_label {
    ($($t:ty),*) => {$(
        impl OutcomeLabel for $t {
            fn outcome_label(&self) -> &'static str {
                "accepted"
            }
        }
    )*};
}

accepted_label!(
    crate::Accepted,
    crate::Claimed,
    crate::Snapshot,
    Option<FencingToken>,
    Vec<crate::LogEntry>,
    FencingToken,
    crate::Lease,
    Option<crate::LeaseHolder>,
    crate::RebaseRecord,
    Vec<crate::RebaseRecord>,
    crate::Retired,
    ()
);

/// The label of an outcome that may be a replay: `duplicate` or `accepted`.
pub fn replay_label(duplicate: bool) -> &'static str {
    if duplicate {
        "duplicate"
    } else {
        "accepted"
    }
}

impl OutcomeLabel for crate::WriteOutcome {
    fn outcome_label(&self) -> &'static str {
        crate::WriteOutcome::outcome_label(self)
    }
}

impl OutcomeLabel for crate::AppendOutcome {
    fn outcome_label(&self) -> &'static str {
        crate::AppendOutcome::outcome_label(self)
    }
}

/// Runs `operation` inside a `fence` span and records its outcome in the counters.
pub async fn observe<T, F>(
    backend: &'static str,
    operation: Operation,
    domain: &Domain,
    token: Option<FencingToken>,
    future: F,
) -> Result<T, FenceError>
where
    T: OutcomeLabel,
    F: Future<Output = Result<T, FenceError>>,
{
    let span = tracing::debug_span!(
        "fence",
        backend,
        operation = operation.as_str(),
        domain = domain.as_str(),
        token = token.map(FencingToken::get),
        outcome = tracing::field::Empty,
    );
    let started = Instant::now();
    let result = if span.is_disabled() {
        future.await
    } else {
        future.instrument(span.clone()).await
    };
    record(backend, operation, domain, token, &result, &span, started);
    result
}

fn record<T: OutcomeLabel>(
    backend: &'static str,
    operation: Operation,
    domain: &Domain,
    token: Option<FencingToken>,
    result: &Result<T, FenceError>,
    span: &tracing::Span,
    started: Instant,
) {
    let now = Instant::now();
    let elapsed = now.saturating_duration_since(started);
    let outcome = match result {
        Ok(value) => value.outcome_label(),
        Err(error) => error.outcome_label(),
    };
    span.record("outcome", outcome);
    let name = if matches!(
        operation,
        Operation::Write | Operation::Delete | Operation::Append
    ) {
        "fence_writes_total"
    } else {
        "fence_operations_total"
    };
    with_handles(
        name,
        backend,
        operation,
        outcome,
        now,
        |counter, histogram| {
            counter.increment(1);
            histogram.record(elapsed.as_secs_f64());
        },
    );
    match result {
        Err(FenceError::Fenced { current, .. }) => tracing::warn!(
            parent: span,
            backend,
            operation = operation.as_str(),
            domain = domain.as_str(),
            presented = token.map(FencingToken::get),
            current = current.get(),
            "stale token rejected: two holders overlapped on this domain"
        ),
        Err(FenceError::Ambiguous { .. }) => tracing::warn!(
            parent: span,
            backend,
            operation = operation.as_str(),
            domain = domain.as_str(),
            "outcome unknown; retry with the same operation id"
        ),
        _ => {}
    }
}

/// A thread's registered handles of one (metric, backend, operation, outcome), the recorder
/// they were registered with and when they were last used.
struct Handles {
    name: &'static str,
    backend: &'static str,
    operation: Operation,
    outcome: &'static str,
    recorder: *const (),
    last_used: Instant,
    counter: Counter,
    histogram: Histogram,
}

/// A handle unused for this long is registered again before its next use.
const REFRESH_AFTER: Duration = Duration::from_secs(1);

thread_local! {
    static HANDLES: RefCell<Vec<Handles>> = const { RefCell::new(Vec::new()) };
}

/// The address of the recorder in use on this thread: its identity, for the cache.
fn recorder_address() -> *const () {
    metrics::with_recorder(|recorder| (recorder as *const dyn Recorder).cast::<()>())
}

/// Runs `f` with this thread's handles for the key, registering them on first use, when the
/// thread's recorder changed, or when they went unused for [`REFRESH_AFTER`]. A thread sees a
/// handful of keys, so a scan is enough. Without a usable cache (re-entered from inside a
/// recorder, or the thread's locals torn down) the handles are registered for this call only.
fn with_handles(
    name: &'static str,
    backend: &'static str,
    operation: Operation,
    outcome: &'static str,
    now: Instant,
    f: impl FnOnce(&Counter, &Histogram),
) {
    let recorder = recorder_address();
    let same_key = |h: &Handles| {
        h.operation == operation && h.outcome == outcome && h.backend == backend && h.name == name
    };
    let mut f = Some(f);
    let _ = HANDLES.try_with(|cell| {
        let Ok(mut handles) = cell.try_borrow_mut() else {
            return;
        };
        let index = match handles.iter().position(same_key) {
            Some(i)
                if handles[i].recorder == recorder
                    && now.saturating_duration_since(handles[i].last_used) < REFRESH_AFTER =>
            {
                i
            }
            found => {
                let fresh = Handles {
                    name,
                    backend,
                    operation,
                    outcome,
                    recorder,
                    last_used: now,
                    counter: register_counter(name, backend, operation, outcome),
                    histogram: register_histogram(backend, operation, outcome),
                };
                match found {
                    Some(i) => {
                        handles[i] = fresh;
                        i
                    }
                    None => {
                        handles.push(fresh);
                        handles.len() - 1
                    }
                }
            }
        };
        let h = &mut handles[index];
        h.last_used = now;
        if let Some(f) = f.take() {
            f(&h.counter, &h.histogram);
        }
    });
    if let Some(f) = f.take() {
        f(
            &register_counter(name, backend, operation, outcome),
            &register_histogram(backend, operation, outcome),
        );
    }
}

fn register_counter(
    name: &'static str,
    backend: &'static str,
    operation: Operation,
    outcome: &'static str,
) -> Counter {
    metrics::counter!(
        name,
        "backend" => backend,
        "operation" => operation.as_str(),
        "outcome" => outcome
    )
}

fn register_histogram(
    backend: &'static str,
    operation: Operation,
    outcome: &'static str,
) -> Histogram {
    metrics::histogram!(
        "fence_operation_duration_seconds",
        "backend" => backend,
        "operation" => operation.as_str(),
        "outcome" => outcome
    )
}
