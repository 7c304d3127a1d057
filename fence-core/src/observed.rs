//! Telemetry as a layer: [`Observed`] wraps any adapter, issuer or lease manager and traces
//! and counts every operation of its traits, so adapters implement the plain traits and report
//! alike without writing any of it.

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use async_trait::async_trait;

use crate::telemetry::observe;
use crate::{
    AppendOutcome, AppendRequest, Capabilities, Claimed, Domain, Fence, FenceError, FencedLog,
    FencedStore, FencingToken, Lease, LeaseHolder, LeaseManager, LogEntry, Operation, OwnerId,
    Rebase, RebaseRecord, Rebaser, Retired, Retirer, Snapshot, TokenIssuer, WriteOutcome,
    WriteRequest,
};

/// An adapter (or issuer, or lease manager) whose every trait operation runs inside a `fence`
/// span and is counted and timed (below): claims, marks, writes, deletes,
/// reads, appends, log reads, issues, leases, re-bases and retirements alike.
///
/// The adapters' builders and constructors return their adapter wrapped in it; wrap one
/// yourself with [`Observed::new`] (the in-memory adapter comes bare). The adapter's own
/// methods stay reachable through `Deref`; the trait methods called on an `Observed` are the
/// observed ones.
///
/// # Metrics and spans
/// Through the `metrics` facade (install any recorder to collect them), per operation:
/// - `fence_writes_total{backend, operation, outcome}` for writes, deletes and appends;
/// - `fence_operations_total{backend, operation, outcome}` for every other operation;
/// - `fence_operation_duration_seconds{backend, operation, outcome}`, a histogram of every
///   operation's latency as the caller saw it (retries inside the adapter included).
///
/// Spans carry backend, operation, domain, token and outcome; never payloads or secrets.
/// Fenced outcomes are logged at `warn`: a rejection is evidence of two overlapping owners.
/// Metric handles are registered once per (backend, operation, outcome) and thread, then
/// reused (registered again when the thread sees another recorder, or after a second unused,
/// for recorders that drop idle metrics): **install the recorder before the first fenced
/// operation**, as the `metrics` crate advises. A span is created only when a `tracing`
/// subscriber wants `debug` spans of this crate.
///
/// ```
/// use fence_core::{Domain, FencedStoreExt, FencingToken, MemoryFence, Observed};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// let store = Observed::new(MemoryFence::new().with_max_value_bytes(1024));
/// store.put(&Domain::new("orders")?, FencingToken::new(1)?, "v1").await?; // traced and counted
/// assert_eq!(store.tracked_domains(), 1); // the adapter's own methods, through `Deref`
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Observed<T> {
    inner: T,
}

impl<T> Observed<T> {
    /// `inner` with telemetry on every trait operation.
    pub fn new(inner: T) -> Self {
        Observed { inner }
    }

    /// The wrapped adapter.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The wrapped adapter, without the layer: its operations are then neither traced nor
    /// counted.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T> Deref for Observed<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.inner
    }
}

/// The adapter's own `Debug`: the layer adds nothing worth printing.
impl<T: fmt::Debug> fmt::Debug for Observed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait]
impl<T: Fence> Fence for Observed<T> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        let future = self.inner.claim(domain, token);
        observe(
            self.backend(),
            Operation::Claim,
            domain,
            Some(token),
            future,
        )
        .await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        let future = self.inner.high_water_mark(domain);
        observe(
            self.backend(),
            Operation::HighWaterMark,
            domain,
            None,
            future,
        )
        .await
    }
}

#[async_trait]
impl<T: FencedStore> FencedStore for Observed<T> {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let (operation, token) = (request.operation(), Some(request.token()));
        let future = self.inner.write(request);
        observe(self.backend(), operation, request.domain(), token, future).await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        let future = self.inner.read(domain);
        observe(self.backend(), Operation::Read, domain, None, future).await
    }
}

#[async_trait]
impl<T: FencedLog> FencedLog for Observed<T> {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        let token = Some(request.token());
        let future = self.inner.append(request);
        observe(
            self.backend(),
            Operation::Append,
            request.domain(),
            token,
            future,
        )
        .await
    }

    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        let future = self.inner.read_log(domain);
        observe(self.backend(), Operation::ReadLog, domain, None, future).await
    }
}

#[async_trait]
impl<T: TokenIssuer> TokenIssuer for Observed<T> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        let future = self.inner.issue(domain);
        observe(self.backend(), Operation::Issue, domain, None, future).await
    }
}

#[async_trait]
impl<T: LeaseManager> LeaseManager for Observed<T> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        let future = self.inner.acquire(domain, owner, ttl);
        observe(self.backend(), Operation::Lease, domain, None, future).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        let (domain, token) = (&lease.domain, Some(lease.token));
        let future = self.inner.renew(lease, ttl);
        observe(self.backend(), Operation::Lease, domain, token, future).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        let (domain, token) = (&lease.domain, Some(lease.token));
        let future = self.inner.release(lease);
        observe(self.backend(), Operation::Lease, domain, token, future).await
    }

    // Waiting is not an operation on the resource: not counted.
    async fn wait_for_release(&self, domain: &Domain, within: Duration) {
        self.inner.wait_for_release(domain, within).await;
    }

    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        let future = self.inner.holder(domain);
        observe(self.backend(), Operation::LeaseHolder, domain, None, future).await
    }
}

#[async_trait]
impl<T: Rebaser + Fence> Rebaser for Observed<T> {
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let token = Some(rebase.to());
        let future = self.inner.rebase(domain, rebase);
        observe(self.backend(), Operation::Rebase, domain, token, future).await
    }

    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError> {
        let future = self.inner.rebases(domain);
        observe(self.backend(), Operation::Rebases, domain, None, future).await
    }
}

#[async_trait]
impl<T: Retirer + Fence> Retirer for Observed<T> {
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        let future = self.inner.retire(domain);
        observe(self.backend(), Operation::Retire, domain, None, future).await
    }
}
