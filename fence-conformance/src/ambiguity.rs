//! The contract for a connection cut mid-request, run by each adapter through its real server
//! behind a [`TcpProxy`]: the outcome is `Ambiguous`, and both documented ways of learning it
//! work — a retry with the same operation id, and reading the domain back.

use std::future::Future;
use std::time::Duration;

use fence_core::{
    Backoff, Domain, FenceError, FencedStore, OperationId, Retry, RetryPolicy, Revision,
    WriteRequest,
};

use crate::proxy::TcpProxy;
use crate::services::{put, token};

/// How long the connections must be quiet before a fault is injected (a client's background
/// traffic, like sqlx's ping of a connection back in its pool, must not take the fault).
const SETTLE: Duration = Duration::from_millis(150);

/// Runs the cut-connection contract on `domain`, which must be fresh, through `store`, whose
/// connections all go through `proxy`. Panics (failing the test) on any breach.
pub async fn cut_connections_are_ambiguous_and_learnable(
    store: &dyn FencedStore,
    proxy: &TcpProxy,
    domain: &Domain,
) {
    put(store, domain, 1, "first")
        .await
        .unwrap_or_else(|e| panic!("first write: {e}"));

    // With an operation id: the retry answers `Duplicate` with the first outcome.
    let op = OperationId::new("op-2").unwrap_or_else(|e| panic!("{e}"));
    let request = WriteRequest::put(domain.clone(), token(2), "second").with_op_id(op);
    proxy.settle(SETTLE).await;
    proxy.lose_replies();
    let cut = store.write(&request).await;
    proxy.forward();
    assert!(
        matches!(cut, Err(FenceError::Ambiguous { .. })),
        "a request whose reply was cut must be ambiguous: {cut:?}"
    );
    let retry = answered("the retry", patient(store).write(&request)).await;
    assert!(
        retry.is_duplicate(),
        "the retry must replay, not apply again: {retry:?}"
    );
    assert_eq!(retry.accepted().revision, Revision::new(2));

    // Without one: read back the writer token, revision and value.
    let before = answered("read before", patient(store).read(domain)).await;
    proxy.settle(SETTLE).await;
    proxy.lose_replies();
    let cut = put(store, domain, 3, "third").await;
    proxy.forward();
    assert!(matches!(cut, Err(FenceError::Ambiguous { .. })), "{cut:?}");
    let applied = answered("read back", patient(store).read(domain)).await;
    assert_eq!(
        applied.written_by(),
        Some(token(3)),
        "the write with token 3 applied"
    );
    assert_eq!(applied.revision(), before.revision().map(Revision::next));
    assert_eq!(applied.value().map(|v| v.to_vec()), Some(b"third".to_vec()));

    // And when the request itself was lost, the same read-back shows it did not apply.
    proxy.settle(SETTLE).await;
    proxy.lose_requests();
    let cut = put(store, domain, 4, "fourth").await;
    proxy.forward();
    assert!(matches!(cut, Err(FenceError::Ambiguous { .. })), "{cut:?}");
    let after = answered("read after", patient(store).read(domain)).await;
    assert_eq!(
        (after.written_by(), after.revision(), after.high_water_mark),
        (
            applied.written_by(),
            applied.revision(),
            applied.high_water_mark
        ),
        "the lost write with token 4 changed nothing"
    );
}

/// `store` behind fence-core's retry layer: the same request again while the client
/// re-establishes its connection, for up to ~5 s.
fn patient(store: &dyn FencedStore) -> Retry<&dyn FencedStore> {
    let pause = Backoff::new(Duration::from_millis(100), Duration::from_millis(100));
    Retry::new(store, RetryPolicy::new(50, pause, Duration::from_secs(5)))
}

/// What `call` answered, or a panic with what it failed with.
async fn answered<T>(what: &str, call: impl Future<Output = Result<T, FenceError>>) -> T {
    call.await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"))
}

/// The contract for a request whose reply never comes (the server paused past the client's
/// timeout): run through `store` on `domain`, with `pause` and `resume` stopping and continuing
/// the real server (SIGSTOP / SIGCONT). The write is `Ambiguous` and retryable, and its retry
/// with the same operation id, retried until the server answers again (up to `patience`),
/// learns the outcome: applied exactly once, one revision above what was there before.
pub async fn paused_write_is_ambiguous_and_a_retry_applies_once(
    store: &dyn FencedStore,
    domain: &Domain,
    pause: impl FnOnce(),
    resume: impl FnOnce(),
    patience: Duration,
) {
    let before = store
        .read(domain)
        .await
        .unwrap_or_else(|e| panic!("read before: {e}"))
        .revision();
    let expected = before.map_or(Revision::new(1), Revision::next);
    let op = OperationId::new("paused-op").unwrap_or_else(|e| panic!("{e}"));
    let request = WriteRequest::put(domain.clone(), token(1), "once").with_op_id(op);
    pause();
    let paused = store.write(&request).await;
    resume();
    match &paused {
        Err(e @ FenceError::Ambiguous { .. }) => assert!(e.is_retryable(), "{e}"),
        other => panic!("a write whose reply never came must be ambiguous, got {other:?}"),
    }
    // The retry is fence-core's policy layer: the same request (same op id) until an answer
    // that is not a curable failure, within `patience`.
    let pause = Backoff::new(Duration::from_millis(100), Duration::from_millis(100));
    let retry = Retry::new(store, RetryPolicy::new(u32::MAX, pause, patience))
        .write(&request)
        .await
        .unwrap_or_else(|e| panic!("the retry never learned the outcome: {e}"));
    assert_eq!(
        retry.accepted().revision,
        expected,
        "applied exactly once: {retry:?}"
    );
    let after = store
        .read(domain)
        .await
        .unwrap_or_else(|e| panic!("read after: {e}"));
    assert_eq!(after.revision(), Some(expected), "applied exactly once");
}
