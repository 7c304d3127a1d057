//! Replica acknowledgement against a real primary and replica whose replication link runs
//! through a loopback proxy that can hold the bytes: a change the replica has not acknowledged
//! is never reported as plain success, and a failover at that moment loses it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::redis as support;

use std::time::Duration;

use fence_conformance::proxy::TcpProxy;
use fence_conformance::services::{domain as d, token as t};
use fence_conformance::wait::until;
use fence_core::{Fence, FenceError, FencedStore, Operation, OperationId, WriteRequest};
use fence_redis::{FencedScript, RedisFence, ScriptCall};
use support::RedisServer;

fn unreplicated(result: Result<impl std::fmt::Debug, FenceError>, operation: Operation) {
    match result {
        Err(
            ref error @ FenceError::Unreplicated {
                operation: op,
                requested: 1,
                acknowledged: 0,
                ..
            },
        ) => {
            assert_eq!(op, operation);
            assert!(error.is_retryable());
        }
        other => panic!("expected {operation} unreplicated 0 of 1, got {other:?}"),
    }
}

// Multi-threaded: the proxy's tasks run while the test waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_no_replica_acknowledged_is_unreplicated_and_a_retry_waits_again() {
    let Some(primary) = RedisServer::start("primary", &[]) else {
        return;
    };
    let link = TcpProxy::start(format!("127.0.0.1:{}", primary.port).parse().unwrap())
        .await
        .unwrap();
    let port = link.port().to_string();
    let replica = RedisServer::start("replica", &["--replicaof", "127.0.0.1", &port]).unwrap();
    until("the replica syncs", Duration::from_secs(20), || {
        primary.replicated_by(&replica)
    })
    .await;
    let fence = RedisFence::builder()
        .url(primary.url())
        .wait_for_replicas(1, Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let domain = d("replicated");
    let op = |name: &str| OperationId::new(name).unwrap();
    let first = fence
        .write(&WriteRequest::put(domain.clone(), t(1), "one").with_op_id(op("w1")))
        .await
        .unwrap();
    assert_eq!(first.accepted().replicas_acknowledged, Some(1));

    // The replica lags: replication bytes wait in the proxy, acknowledgements too.
    link.hold();
    let write = WriteRequest::put(domain.clone(), t(2), "two").with_op_id(op("w2"));
    unreplicated(fence.write(&write).await, Operation::Write);
    unreplicated(fence.claim(&domain, t(3)).await, Operation::Claim);
    let delete = WriteRequest::delete(domain.clone(), t(3)).with_op_id(op("d3"));
    unreplicated(fence.write(&delete).await, Operation::Delete);
    let script = FencedScript::new("return redis.call('INCR', KEYS[1])");
    let call = ScriptCall::new(domain.clone(), t(3))
        .key("counter")
        .with_op_id(op("s3"));
    unreplicated(fence.run_script(&script, &call).await, Operation::Write);

    // The link catches up: each retry with the same op id (or token) replays and waits again.
    link.forward();
    let retried = fence.write(&write).await.unwrap();
    assert!(retried.is_duplicate(), "{retried:?}");
    assert_eq!(retried.accepted().replicas_acknowledged, Some(1));
    assert_eq!(fence.claim(&domain, t(3)).await.unwrap().token, t(3));
    assert!(fence.write(&delete).await.unwrap().is_duplicate());
    let ran = fence.run_script(&script, &call).await.unwrap();
    assert!(
        ran.duplicate && ran.replicas_acknowledged == Some(1),
        "{ran:?}"
    );

    // A retry on another connection (another process, or after a reconnect) waits for the
    // replicas too: the replay writes, so its WAIT covers the first run's change.
    link.hold();
    let late = WriteRequest::put(domain.clone(), t(3), "late").with_op_id(op("w4"));
    unreplicated(fence.write(&late).await, Operation::Write);
    let other = RedisFence::builder()
        .url(primary.url())
        .wait_for_replicas(1, Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    unreplicated(other.write(&late).await, Operation::Write);
    link.forward();
    let replayed = other.write(&late).await.unwrap();
    assert!(replayed.is_duplicate() && replayed.accepted().replicas_acknowledged == Some(1));

    // A claim of the mark the domain already holds changes nothing; under WAIT it still writes
    // the mark, so that, on another connection, its WAIT covers the unreplicated raise it read
    // (were nothing written, that connection's WAIT would answer at once: acknowledged).
    link.hold();
    unreplicated(fence.claim(&domain, t(5)).await, Operation::Claim);
    unreplicated(other.claim(&domain, t(5)).await, Operation::Claim);
    link.forward();
    assert_eq!(other.claim(&domain, t(5)).await.unwrap().token, t(5));

    // Why it is not success: the replica lags, the primary dies, the replica is promoted, and
    // the mark the primary alone had is gone.
    link.hold();
    unreplicated(fence.claim(&domain, t(9)).await, Operation::Claim);
    drop(primary);
    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    let promoted = RedisFence::builder()
        .url(replica.url())
        .connect()
        .await
        .unwrap();
    let mark = promoted.high_water_mark(&domain).await.unwrap();
    println!(
        "failover: the promoted replica's mark is {mark:?}; the unreplicated claim of 9 is lost"
    );
    assert_eq!(
        mark,
        Some(t(5)),
        "the promoted replica has everything acknowledged, not 9"
    );
}
