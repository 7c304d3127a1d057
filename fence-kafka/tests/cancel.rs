//! An append whose caller stopped waiting (its future dropped by a timeout) while the
//! transaction ran on, then retried with the same operation id: applied once.
//!
//! Found by the torture run on Apache Kafka behind a fault proxy: the dropped append's
//! transaction committed in the background, the retry decided on the holder's state from
//! before it, and the batch was committed twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use fence_conformance::services::token as t;
use fence_core::{AppendOutcome, AppendRequest, FencedLog, OperationId, Record};
use fence_testkit::kafka::ProxiedFence;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_after_a_dropped_append_is_applied_once() {
    let Some(ProxiedFence {
        server: _server,
        proxy,
        fence,
        domain,
    }) = ProxiedFence::start("cancel").await
    else {
        return;
    };

    let request = AppendRequest::new(domain.clone(), t(1), vec![Record::new("once")])
        .with_op_id(OperationId::new("op-once").unwrap());
    proxy.hold(); // the broker answers nothing until released
    let gave_up = tokio::time::timeout(Duration::from_millis(300), fence.append(&request)).await;
    assert!(gave_up.is_err(), "the held broker cannot answer in time");
    proxy.forward(); // the dropped append's transaction runs on and commits

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = fence.read_log(&domain).await;
        if log.is_ok_and(|l| l.iter().any(|e| &e.record.value[..] == b"once")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dropped append never committed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let retried = fence.append(&request).await.unwrap();
    assert!(
        matches!(retried, AppendOutcome::Duplicate(_)),
        "the retry must replay the committed append, got {retried:?}"
    );
    let log = fence.read_log(&domain).await.unwrap();
    let values: Vec<&[u8]> = log.iter().map(|e| &e.record.value[..]).collect();
    assert_eq!(values, vec![&b"first"[..], &b"once"[..]]);
}
