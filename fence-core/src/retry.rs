//! Retries as a layer: [`Retry`] wraps any adapter, issuer or lease manager and tries an
//! operation again after a failure a retry can cure, only where trying again is safe.
//!
//! Adapters retry what their protocol needs (a request proven never sent, a lost
//! compare-and-swap race); whether a caller waits out an unreachable server is policy, and
//! lives here.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::{
    AppendOutcome, AppendRequest, BackendErrorKind, Backoff, Capabilities, Claimed, Domain, Fence,
    FenceError, FencedLog, FencedStore, FencingToken, Lease, LeaseHolder, LeaseManager, LogEntry,
    OwnerId, Rebase, RebaseRecord, Rebaser, Retired, Retirer, Snapshot, TokenIssuer, WriteOutcome,
    WriteRequest,
};

/// How [`Retry`] retries: at most `max_attempts` attempts in all, waiting `backoff` between
/// them, and no new attempt once `deadline` has passed since the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included (at least 1).
    pub max_attempts: u32,
    /// The wait before each retry.
    pub backoff: Backoff,
    /// No retry starts later than this after the first attempt.
    pub deadline: Duration,
}

impl RetryPolicy {
    /// Up to `max_attempts` attempts (at least 1), `backoff` between them, none started after
    /// `deadline`.
    pub fn new(max_attempts: u32, backoff: Backoff, deadline: Duration) -> Self {
        RetryPolicy {
            max_attempts: max_attempts.max(1),
            backoff,
            deadline,
        }
    }
}

impl Default for RetryPolicy {
    /// Five attempts, 50 ms to 2 s apart, none started after 10 s.
    fn default() -> Self {
        RetryPolicy::new(
            5,
            Backoff::new(Duration::from_millis(50), Duration::from_secs(2)),
            Duration::from_secs(10),
        )
    }
}

/// Which failures an operation may be tried again after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Safety {
    /// Every retryable failure ([`FenceError::is_retryable`]): the operation is idempotent
    /// (reads, claims of one token, issues and acquisitions that may only waste a token), or
    /// it carries an operation id that makes a second attempt report the first one's outcome.
    Retryable,
    /// Only failures that prove nothing happened (a backend `Unavailable`): a second attempt
    /// after an ambiguous one could report its own outcome as if it were the first's (a
    /// release after a release that landed is `LeaseLost`; a write without an operation id
    /// may apply twice).
    NothingHappened,
}

impl Safety {
    fn allows(self, error: &FenceError) -> bool {
        match self {
            Safety::Retryable => error.is_retryable(),
            Safety::NothingHappened => error.backend_kind() == Some(BackendErrorKind::Unavailable),
        }
    }
}

/// An adapter (or issuer, or lease manager) whose operations are tried again, as its
/// [`RetryPolicy`] says, after a failure [`FenceError::is_retryable`] calls curable, where a
/// second attempt is safe:
/// - reads, mark queries, claims, issues, acquisitions and renewals: after any retryable
///   failure;
/// - writes and appends: after any retryable failure when the request carries an operation id
///   and the resource remembers op ids (the retry then reports the first attempt's outcome as
///   [`WriteOutcome::Duplicate`]); otherwise only after a failure that proves nothing was
///   applied;
/// - releases, re-bases and retirements: only after a failure that proves nothing happened.
///
/// A failure after which the operation may have applied ([`FenceError::Ambiguous`],
/// [`FenceError::Unreplicated`]) that no retry settled is reported as it was, never as a later
/// attempt's failure that says nothing of it. No retry starts (pause included) after the
/// policy's deadline.
///
/// Put it inside [`crate::Observed`] to count and time what the caller sees, outside to count
/// every attempt.
///
/// ```
/// use fence_core::{Domain, FencedStoreExt, FencingToken, MemoryFence, Observed};
/// use fence_core::{Retry, RetryPolicy};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// let store = Observed::new(Retry::new(MemoryFence::new(), RetryPolicy::default()));
/// store.put(&Domain::new("orders")?, FencingToken::new(1)?, "v1").await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Retry<T> {
    inner: T,
    policy: RetryPolicy,
}

impl<T> Retry<T> {
    /// `inner` with its operations retried as `policy` says.
    pub fn new(inner: T, policy: RetryPolicy) -> Self {
        Retry { inner, policy }
    }

    /// The policy.
    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// The wrapped adapter.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The wrapped adapter, without the layer.
    pub fn into_inner(self) -> T {
        self.inner
    }

    /// Runs `attempt` until it answers, fails in a way `safety` does not retry, or the policy
    /// runs out. A failure no retry can cure is the answer (to the first attempt too: the
    /// operation id, or the operation's idempotence, makes it so); otherwise the first failure
    /// that may have applied ([`FenceError::Ambiguous`], [`FenceError::Unreplicated`])
    /// outlives the curable failures after it.
    async fn run<R, F, Fut>(&self, safety: Safety, mut attempt: F) -> Result<R, FenceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<R, FenceError>>,
    {
        let started = Instant::now();
        let mut ambiguous: Option<FenceError> = None;
        let mut tries = 0u32;
        loop {
            let error = match attempt().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            tries += 1;
            if !error.is_retryable() {
                return Err(error);
            }
            let pause = self.policy.backoff.delay(tries - 1);
            let again = safety.allows(&error)
                && tries < self.policy.max_attempts
                && started.elapsed() + pause < self.policy.deadline;
            let kept = ambiguous.take().unwrap_or(error);
            if !again {
                return Err(kept);
            }
            if may_have_applied(&kept) {
                ambiguous = Some(kept);
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// A failure after which the operation may have taken effect (answered by a retry with the
/// same operation id, never by a failure that says nothing of the first attempt).
fn may_have_applied(error: &FenceError) -> bool {
    matches!(
        error,
        FenceError::Ambiguous { .. } | FenceError::Unreplicated { .. }
    )
}

impl<T> Deref for Retry<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.inner
    }
}

/// The adapter's own `Debug`, and the policy.
impl<T: fmt::Debug> fmt::Debug for Retry<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .finish()
    }
}

/// A write or append is safe to repeat after an ambiguous attempt only with an operation id
/// that the resource remembers (an adapter built without op-id memory would apply it again).
fn replayable(has_op_id: bool, capabilities: Capabilities) -> Safety {
    if has_op_id && capabilities.op_id_replay() {
        Safety::Retryable
    } else {
        Safety::NothingHappened
    }
}

#[async_trait]
impl<T: Fence> Fence for Retry<T> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.run(Safety::Retryable, || self.inner.claim(domain, token))
            .await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        self.run(Safety::Retryable, || self.inner.high_water_mark(domain))
            .await
    }
}

#[async_trait]
impl<T: FencedStore> FencedStore for Retry<T> {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let safety = replayable(request.op_id().is_some(), self.inner.capabilities());
        self.run(safety, || self.inner.write(request)).await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.run(Safety::Retryable, || self.inner.read(domain))
            .await
    }
}

#[async_trait]
impl<T: FencedLog> FencedLog for Retry<T> {
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
        let safety = replayable(request.op_id().is_some(), self.inner.capabilities());
        self.run(safety, || self.inner.append(request)).await
    }

    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
        self.run(Safety::Retryable, || self.inner.read_log(domain))
            .await
    }
}

#[async_trait]
impl<T: TokenIssuer> TokenIssuer for Retry<T> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn issue(&self, domain: &Domain) -> Result<FencingToken, FenceError> {
        self.run(Safety::Retryable, || self.inner.issue(domain))
            .await
    }
}

#[async_trait]
impl<T: LeaseManager> LeaseManager for Retry<T> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        // The same owner re-acquires its own lease: a second attempt after one that landed
        // takes it again, with a greater token.
        self.run(Safety::Retryable, || self.inner.acquire(domain, owner, ttl))
            .await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        self.run(Safety::Retryable, || self.inner.renew(lease, ttl))
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        self.run(Safety::NothingHappened, || self.inner.release(lease))
            .await
    }

    async fn wait_for_release(&self, domain: &Domain, within: Duration) {
        self.inner.wait_for_release(domain, within).await;
    }

    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        self.run(Safety::Retryable, || self.inner.holder(domain))
            .await
    }
}

#[async_trait]
impl<T: Rebaser> Rebaser for Retry<T> {
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        self.run(Safety::NothingHappened, || {
            self.inner.rebase(domain, rebase)
        })
        .await
    }

    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError> {
        self.run(Safety::Retryable, || self.inner.rebases(domain))
            .await
    }
}

#[async_trait]
impl<T: Retirer> Retirer for Retry<T> {
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        self.run(Safety::NothingHappened, || self.inner.retire(domain))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;
    use crate::{Accepted, MemoryLeases, Operation, OperationId, Revision};

    /// A store that answers writes from a script, counting the attempts.
    #[derive(Debug)]
    struct Scripted {
        answers: Mutex<VecDeque<Result<WriteOutcome, FenceError>>>,
        attempts: Mutex<u32>,
        remembers_op_ids: bool,
    }

    impl Scripted {
        fn new(answers: Vec<Result<WriteOutcome, FenceError>>) -> Self {
            Scripted {
                answers: Mutex::new(answers.into()),
                attempts: Mutex::new(0),
                remembers_op_ids: true,
            }
        }

        fn forgetting_op_ids(mut self) -> Self {
            self.remembers_op_ids = false;
            self
        }

        fn attempts(&self) -> u32 {
            *self.attempts.lock().unwrap_or_else(|p| p.into_inner())
        }
    }

    #[async_trait]
    impl Fence for Scripted {
        fn backend(&self) -> &'static str {
            "scripted"
        }

        fn capabilities(&self) -> Capabilities {
            let retention = if self.remembers_op_ids {
                crate::OpIdRetention::PerDomain(16)
            } else {
                crate::OpIdRetention::None
            };
            Capabilities::store().with_op_id_retention(retention)
        }

        async fn claim(&self, _: &Domain, _: FencingToken) -> Result<Claimed, FenceError> {
            Err(FenceError::unsupported("scripted", "claims"))
        }

        async fn high_water_mark(&self, _: &Domain) -> Result<Option<FencingToken>, FenceError> {
            Ok(None)
        }
    }

    #[async_trait]
    impl FencedStore for Scripted {
        async fn write(&self, _: &WriteRequest) -> Result<WriteOutcome, FenceError> {
            *self.attempts.lock().unwrap_or_else(|p| p.into_inner()) += 1;
            let next = self
                .answers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
            next.unwrap_or_else(|| Err(down()))
        }

        async fn read(&self, _: &Domain) -> Result<Snapshot, FenceError> {
            Err(down())
        }
    }

    fn domain() -> Domain {
        Domain::new("retried").unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn down() -> FenceError {
        FenceError::backend("scripted", BackendErrorKind::Unavailable, None, "refused")
    }

    fn ambiguous() -> FenceError {
        FenceError::Ambiguous {
            domain: domain(),
            operation: Operation::Write,
            source: "timed out after sending".into(),
        }
    }

    fn fenced() -> FenceError {
        FenceError::Fenced {
            domain: domain(),
            presented: token(1),
            current: token(2),
        }
    }

    fn duplicate() -> Result<WriteOutcome, FenceError> {
        Ok(WriteOutcome::Duplicate(Accepted::new(
            token(1),
            Revision::new(1),
            None,
        )))
    }

    fn put(op_id: bool) -> WriteRequest {
        let request = WriteRequest::put(domain(), token(1), "v");
        if op_id {
            request.with_op_id(OperationId::new("op-1").unwrap_or_else(|e| unreachable!("{e}")))
        } else {
            request
        }
    }

    fn quick(max_attempts: u32) -> RetryPolicy {
        let pause = Backoff::new(Duration::from_millis(1), Duration::from_millis(2));
        RetryPolicy::new(max_attempts, pause, Duration::from_secs(10))
    }

    #[tokio::test]
    async fn an_ambiguous_write_with_an_op_id_is_retried_until_settled() {
        let answers = vec![Err(ambiguous()), Err(down()), duplicate()];
        let store = Retry::new(Scripted::new(answers), quick(5));
        let outcome = store.write(&put(true)).await;
        assert!(
            matches!(outcome, Ok(WriteOutcome::Duplicate(_))),
            "{outcome:?}"
        );
        assert_eq!(store.get_ref().attempts(), 3);
    }

    #[tokio::test]
    async fn an_ambiguous_write_without_an_op_id_is_never_repeated() {
        let store = Retry::new(Scripted::new(vec![Err(ambiguous()), duplicate()]), quick(5));
        let outcome = store.write(&put(false)).await;
        assert!(
            matches!(outcome, Err(FenceError::Ambiguous { .. })),
            "{outcome:?}"
        );
        assert_eq!(store.get_ref().attempts(), 1);
        // A failure that proves nothing was applied is retried without an op id too.
        let store = Retry::new(Scripted::new(vec![Err(down()), duplicate()]), quick(5));
        assert!(store.write(&put(false)).await.is_ok());
        assert_eq!(store.get_ref().attempts(), 2);
    }

    #[tokio::test]
    async fn an_op_id_the_resource_forgets_makes_no_retry_safe() {
        let answers = vec![Err(ambiguous()), duplicate()];
        let store = Retry::new(Scripted::new(answers).forgetting_op_ids(), quick(5));
        let outcome = store.write(&put(true)).await;
        assert!(
            matches!(outcome, Err(FenceError::Ambiguous { .. })),
            "{outcome:?}"
        );
        assert_eq!(store.get_ref().attempts(), 1);
    }

    #[tokio::test]
    async fn an_unreplicated_write_outlives_the_curable_failures_after_it() {
        let unreplicated = FenceError::Unreplicated {
            domain: domain(),
            operation: Operation::Write,
            requested: 1,
            acknowledged: 0,
        };
        let store = Retry::new(Scripted::new(vec![Err(unreplicated)]), quick(3));
        let outcome = store.write(&put(true)).await;
        assert!(
            matches!(outcome, Err(FenceError::Unreplicated { .. })),
            "{outcome:?}"
        );
        assert_eq!(store.get_ref().attempts(), 3);
    }

    #[tokio::test]
    async fn an_unsettled_ambiguity_outlives_the_curable_failures_after_it() {
        let store = Retry::new(Scripted::new(vec![Err(ambiguous())]), quick(4));
        let outcome = store.write(&put(true)).await;
        assert!(
            matches!(outcome, Err(FenceError::Ambiguous { .. })),
            "{outcome:?}"
        );
        assert_eq!(store.get_ref().attempts(), 4, "bounded by max_attempts");
    }

    #[tokio::test]
    async fn a_definite_answer_settles_it_and_ends_the_retries() {
        let store = Retry::new(
            Scripted::new(vec![Err(ambiguous()), Err(fenced())]),
            quick(5),
        );
        assert!(store.write(&put(true)).await.is_err_and(|e| e.is_fenced()));
        assert_eq!(store.get_ref().attempts(), 2);
    }

    #[tokio::test]
    async fn the_deadline_stops_new_attempts() {
        let pause = Backoff::new(Duration::from_millis(1), Duration::from_millis(2));
        let policy = RetryPolicy::new(100, pause, Duration::ZERO);
        let store = Retry::new(Scripted::new(vec![]), policy);
        assert!(store
            .write(&put(true))
            .await
            .is_err_and(|e| e.is_retryable()));
        assert_eq!(store.get_ref().attempts(), 1);
    }

    #[tokio::test]
    async fn leases_pass_through() -> Result<(), FenceError> {
        let leases = Retry::new(MemoryLeases::new(), quick(3));
        let owner = OwnerId::new("w")?;
        let lease = leases
            .acquire(&domain(), &owner, Duration::from_secs(5))
            .await?;
        leases.release(&lease).await?;
        // A second release is a definite LeaseLost, never retried into something else.
        assert!(matches!(
            leases.release(&lease).await,
            Err(FenceError::LeaseLost { .. })
        ));
        Ok(())
    }
}
