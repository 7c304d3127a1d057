//! Spans and counters shared by every adapter, so all backends report alike.
//!
//! Metrics (through the `metrics` facade; install any recorder to collect them), per operation:
//! - `fence_writes_total{backend, operation, outcome}` for writes, deletes and appends;
//! - `fence_operations_total{backend, operation, outcome}` for every other operation (claims,
//!   reads, mark queries, issues, leases);
//! - `fence_operation_duration_seconds{backend, operation, outcome}`, a histogram of every
//!   operation's latency as the caller saw it (retries inside the adapter included).
//!
//! Spans carry backend, operation, domain, token and outcome; never payloads or secrets.
//! Fenced outcomes are logged at `warn`: a rejection is evidence of two overlapping owners.

use std::future::Future;

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
    let started = std::time::Instant::now();
    let result = future.instrument(span.clone()).await;
    record(
        backend,
        operation,
        domain,
        token,
        &result,
        &span,
        started.elapsed(),
    );
    result
}

fn record<T: OutcomeLabel>(
    backend: &'static str,
    operation: Operation,
    domain: &Domain,
    token: Option<FencingToken>,
    result: &Result<T, FenceError>,
    span: &tracing::Span,
    elapsed: std::time::Duration,
) {
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
    metrics::counter!(
        name,
        "backend" => backend,
        "operation" => operation.as_str(),
        "outcome" => outcome
    )
    .increment(1);
    metrics::histogram!(
        "fence_operation_duration_seconds",
        "backend" => backend,
        "operation" => operation.as_str(),
        "outcome" => outcome
    )
    .record(elapsed.as_secs_f64());
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
