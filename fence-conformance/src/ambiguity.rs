//! The contract for a connection cut mid-request, run by each adapter through its real server
//! behind a [`TcpProxy`]: the outcome is `Ambiguous`, and both documented ways of learning it
//! work — a retry with the same operation id, and reading the domain back.

use std::future::Future;
use std::time::Duration;

use fence_core::{Domain, FenceError, FencedStore, OperationId, Revision, WriteRequest};

use crate::proxy::TcpProxy;
use crate::services::{put, token};

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
    proxy.lose_replies();
    let cut = store.write(&request).await;
    proxy.forward();
    assert!(
        matches!(cut, Err(FenceError::Ambiguous { .. })),
        "a request whose reply was cut must be ambiguous: {cut:?}"
    );
    let retry = until_answered(|| store.write(&request)).await;
    assert!(
        retry.is_duplicate(),
        "the retry must replay, not apply again: {retry:?}"
    );
    assert_eq!(retry.accepted().revision, Revision::new(2));

    // Without one: read back the writer token, revision and value.
    let before = until_answered(|| store.read(domain)).await;
    proxy.lose_replies();
    let cut = put(store, domain, 3, "third").await;
    proxy.forward();
    assert!(matches!(cut, Err(FenceError::Ambiguous { .. })), "{cut:?}");
    let applied = until_answered(|| store.read(domain)).await;
    assert_eq!(
        applied.written_by(),
        Some(token(3)),
        "the write with token 3 applied"
    );
    assert_eq!(applied.revision(), before.revision().map(Revision::next));
    assert_eq!(applied.value().map(|v| v.to_vec()), Some(b"third".to_vec()));

    // And when the request itself was lost, the same read-back shows it did not apply.
    proxy.lose_requests();
    let cut = put(store, domain, 4, "fourth").await;
    proxy.forward();
    assert!(matches!(cut, Err(FenceError::Ambiguous { .. })), "{cut:?}");
    let after = until_answered(|| store.read(domain)).await;
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

/// Retries while the client re-establishes its connection; fails after ~5 s.
async fn until_answered<T, F, Fut>(mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, FenceError>>,
{
    let mut last = None;
    for _ in 0..50 {
        match call().await {
            Ok(value) => return value,
            Err(error) if error.is_retryable() => last = Some(error),
            Err(error) => panic!("not retryable: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no answer after 5 s: {last:?}")
}
