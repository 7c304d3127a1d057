//! Redis-specific behaviour against real servers: script cache loss, exact 64-bit tokens,
//! fenced user scripts, replica acknowledgements, ambiguous timeouts and kill -9 restarts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::redis as support;

use fence_conformance::services::{assert_fenced, domain as d, put, token as t};

use std::time::Duration;

use fence_core::{
    EqualTokenPolicy, Fence, FenceError, FencedStore, FencingToken, Observed, OperationId,
    Revision, WriteRequest,
};
use fence_redis::redis::{self, AsyncCommands};
use fence_redis::{FencedScript, RedisFence, ScriptCall, ScriptValue};
use support::{shared_cluster, shared_cluster_fence, shared_fence, RedisServer};

async fn flush_scripts(urls: &[String]) {
    for url in urls {
        let mut conn = support::raw(url).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

async fn script_flush_case(fence: Observed<RedisFence>, urls: Vec<String>) {
    let domain = d("flush");
    put(&fence, &domain, 1, "one").await.unwrap();
    flush_scripts(&urls).await;
    put(&fence, &domain, 2, "two")
        .await
        .expect("write after SCRIPT FLUSH");
    flush_scripts(&urls).await;
    fence
        .claim(&domain, t(3))
        .await
        .expect("claim after SCRIPT FLUSH");
    flush_scripts(&urls).await;
    assert_fenced(put(&fence, &domain, 2, "stale").await, 2, 3);
    flush_scripts(&urls).await;
    let snapshot = fence.read(&domain).await.expect("read after SCRIPT FLUSH");
    assert_eq!(snapshot.value().map(|v| v.to_vec()), Some(b"two".to_vec()));
    assert_eq!(snapshot.high_water_mark, Some(t(3)));
    flush_scripts(&urls).await;
    let script = FencedScript::new("return redis.call('INCR', KEYS[1])");
    let outcome = fence
        .run_script(&script, &ScriptCall::new(domain, t(3)).key("n"))
        .await
        .expect("user script after flush");
    assert_eq!(outcome.result, ScriptValue::Integer(1));
}

#[tokio::test]
async fn script_flush_between_operations_still_works() {
    let Some(fence) = shared_fence("flush").await else {
        return;
    };
    let url = support::shared_url().unwrap();
    script_flush_case(fence, vec![url]).await;
}

#[tokio::test]
async fn script_flush_on_every_cluster_node_still_works() {
    let Some(fence) = shared_cluster_fence("flush").await else {
        return;
    };
    script_flush_case(fence, shared_cluster().unwrap()).await;
}

async fn exact_tokens_case(fence: Observed<RedisFence>) {
    let domain = d("exact");
    let p53 = 1u64 << 53;
    for token in [p53 - 1, p53, p53 + 1] {
        put(&fence, &domain, token, &token.to_string())
            .await
            .unwrap_or_else(|e| panic!("token {token}: {e}"));
    }
    // As Lua doubles 2^53 and 2^53 + 1 are the same number: an inexact comparison accepts this.
    assert_fenced(put(&fence, &domain, p53, "stale").await, p53, p53 + 1);
    let strict = WriteRequest::put(domain.clone(), t(p53 + 1), "replay")
        .with_policy(EqualTokenPolicy::Strict);
    assert_fenced(fence.write(&strict).await, p53 + 1, p53 + 1);
    put(&fence, &domain, u64::MAX - 1, "max-1").await.unwrap();
    put(&fence, &domain, u64::MAX, "max").await.unwrap();
    assert_fenced(
        put(&fence, &domain, u64::MAX - 1, "stale").await,
        u64::MAX - 1,
        u64::MAX,
    );
    fence
        .claim(&domain, FencingToken::MAX)
        .await
        .expect("claiming the current mark again");
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(snapshot.high_water_mark, Some(FencingToken::MAX));
    assert_eq!(snapshot.written_by(), Some(FencingToken::MAX));
    assert_eq!(snapshot.value().map(|v| v.to_vec()), Some(b"max".to_vec()));
}

#[tokio::test]
async fn tokens_around_2_pow_53_and_u64_max_compare_exactly() {
    let Some(fence) = shared_fence("exact").await else {
        return;
    };
    exact_tokens_case(fence).await;
}

#[tokio::test]
async fn tokens_around_2_pow_53_and_u64_max_compare_exactly_on_cluster() {
    let Some(fence) = shared_cluster_fence("exact").await else {
        return;
    };
    exact_tokens_case(fence).await;
}

const ADD_ITEM: &str = r#"
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
    redis.call('XADD', KEYS[3], '*', 'sku', ARGV[1])
    return redis.call('INCRBY', KEYS[2], ARGV[3])
"#;

async fn user_script_case(fence: Observed<RedisFence>, raw_url: Option<String>) {
    let domain = d("cart-42");
    let script = FencedScript::new(ADD_ITEM);
    let call = |token: u64, sku: &str, cents: &str| {
        ScriptCall::new(domain.clone(), t(token))
            .key("items")
            .key("total")
            .key("events")
            .arg(sku)
            .arg("1")
            .arg(cents)
    };
    let first = fence
        .run_script(&script, &call(5, "sku-1", "1000"))
        .await
        .unwrap();
    assert_eq!(
        (
            first.result.clone(),
            first.previous_high_water_mark,
            first.duplicate
        ),
        (ScriptValue::Integer(1000), None, false)
    );
    let second = fence
        .run_script(&script, &call(6, "sku-2", "250"))
        .await
        .unwrap();
    assert_eq!(
        (second.result.clone(), second.previous_high_water_mark),
        (ScriptValue::Integer(1250), Some(t(5)))
    );
    assert_eq!(
        fence.high_water_mark(&domain).await.unwrap(),
        Some(t(6)),
        "the mark advances exactly as for a plain write"
    );

    // A stale holder's script does not run at all.
    assert_fenced(
        fence
            .run_script(&script, &call(5, "zombie", "999999"))
            .await,
        5,
        6,
    );
    // And a plain write with the stale token is fenced by the same mark.
    assert_fenced(put(&fence, &domain, 5, "zombie").await, 5, 6);

    // Replays of an operation id run nothing twice.
    let op = OperationId::new("add-sku-3").unwrap();
    let once = fence
        .run_script(&script, &call(6, "sku-3", "5").with_op_id(op.clone()))
        .await
        .unwrap();
    let again = fence
        .run_script(&script, &call(6, "sku-3", "5").with_op_id(op))
        .await
        .unwrap();
    assert_eq!(
        (once.result, once.duplicate),
        (ScriptValue::Integer(1255), false)
    );
    assert!(
        again.duplicate && again.result == ScriptValue::Nil,
        "{again:?}"
    );

    if let Some(url) = raw_url {
        let mut conn = support::raw(&url).await;
        let total: i64 = conn
            .get(fence.user_key(&domain, "total").unwrap())
            .await
            .unwrap();
        let items: Vec<String> = conn
            .hkeys(fence.user_key(&domain, "items").unwrap())
            .await
            .unwrap();
        let events: usize = redis::cmd("XLEN")
            .arg(fence.user_key(&domain, "events").unwrap())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(total, 1255, "the replay and the stale call changed nothing");
        assert_eq!(items.len(), 3);
        assert!(!items.contains(&"zombie".to_owned()));
        assert_eq!(events, 3);
    }
}

#[tokio::test]
async fn fenced_user_script_mutates_several_keys_under_the_fence() {
    let Some(fence) = shared_fence("script").await else {
        return;
    };
    user_script_case(fence, support::shared_url()).await;
}

#[tokio::test]
async fn fenced_user_script_runs_single_slot_on_cluster() {
    let Some(fence) = shared_cluster_fence("script").await else {
        return;
    };
    user_script_case(fence, None).await;
}

#[tokio::test]
async fn wait_reports_how_many_replicas_acknowledged() {
    let Some(url) = support::shared_url() else {
        return;
    };
    let prefix = support::unique_prefix("wait");
    let fence = RedisFence::builder()
        .url(&url)
        .prefix(&prefix)
        .wait_for_replicas(1, Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let domain = d("replicated");
    let outcome = put(&fence, &domain, 1, "v").await.unwrap();
    assert_eq!(
        outcome.accepted().replicas_acknowledged,
        Some(1),
        "the test replica acknowledges"
    );

    // Asking for more replicas than acknowledge is not success: the change is on the primary
    // only, and a retry with the same op id waits again.
    let greedy = RedisFence::builder()
        .url(&url)
        .prefix(&prefix)
        .wait_for_replicas(2, Duration::from_millis(300))
        .build()
        .unwrap();
    let request = WriteRequest::put(domain.clone(), t(2), "v2")
        .with_op_id(OperationId::new("greedy").unwrap());
    for attempt in ["first", "retry"] {
        match greedy.write(&request).await {
            Err(
                error @ FenceError::Unreplicated {
                    requested: 2,
                    acknowledged,
                    ..
                },
            ) => assert!(acknowledged <= 1 && error.is_retryable(), "{attempt}"),
            other => panic!("{attempt}: expected Unreplicated, got {other:?}"),
        }
    }
    let applied = fence.write(&request).await.unwrap();
    assert!(
        applied.is_duplicate(),
        "applied once, on the primary: {applied:?}"
    );
    assert_eq!(applied.accepted().replicas_acknowledged, Some(1));

    let replica_url = std::env::var("FENCE_REDIS_REPLICA_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6391".into());
    let mut replica = support::raw(&replica_url).await;
    let state_key = format!("{prefix}:{{replicated}}:state");
    let hwm: String = replica.hget(&state_key, "hwm").await.unwrap();
    assert_eq!(hwm, "2", "the mark reached the replica with the data");
}

#[tokio::test]
async fn timeout_after_send_is_ambiguous_and_a_retry_never_applies_twice() {
    let Some(server) = RedisServer::start("ambiguous", &[]) else {
        return;
    };
    let fence = RedisFence::builder()
        .url(server.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    fence_conformance::ambiguity::paused_write_is_ambiguous_and_a_retry_applies_once(
        &fence,
        &d("ambiguous"),
        || server.signal("STOP"),
        || server.signal("CONT"),
        Duration::from_secs(5),
    )
    .await;
}

#[tokio::test]
async fn stale_write_after_a_kill_9_restart_is_still_rejected() {
    let Some(server) = RedisServer::start("restart", &[]) else {
        return;
    };
    let fence = RedisFence::builder()
        .url(server.url())
        .connect()
        .await
        .unwrap();
    let domain = d("invoice-7");
    put(&fence, &domain, 7, "draft by A").await.unwrap();
    fence.claim(&domain, t(8)).await.unwrap();
    put(&fence, &domain, 8, "final by B").await.unwrap();
    println!(
        "restart: A wrote with 7, B claimed and wrote with 8 (pid {})",
        server.pid()
    );
    server.kill_and_restart();
    println!(
        "restart: redis-server killed with SIGKILL and started again (pid {})",
        server.pid()
    );
    let fence = RedisFence::builder()
        .url(server.url())
        .connect()
        .await
        .unwrap();
    let stale = put(&fence, &domain, 7, "zombie by A").await;
    println!(
        "restart: A's stale write with 7 -> {}",
        stale
            .as_ref()
            .map_or_else(|e| e.to_string(), |o| format!("{o:?}"))
    );
    assert_fenced(stale, 7, 8);
    let snapshot = fence.read(&domain).await.unwrap();
    println!(
        "restart: value {:?} by token {:?}, revision {:?}, high-water mark {:?}",
        snapshot
            .value()
            .map(|v| String::from_utf8_lossy(v).into_owned()),
        snapshot.written_by().map(FencingToken::get),
        snapshot.revision().map(Revision::get),
        snapshot.high_water_mark.map(FencingToken::get)
    );
    assert_eq!(
        snapshot.value().map(|v| v.to_vec()),
        Some(b"final by B".to_vec())
    );
    assert_eq!(
        (
            snapshot.written_by(),
            snapshot.revision(),
            snapshot.high_water_mark
        ),
        (Some(t(8)), Some(Revision::new(2)), Some(t(8)))
    );
}

// Multi-threaded, as an application is: the connections' tasks see the server go away while
// the test thread is busy restarting it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_is_noticed_before_the_next_request_not_reported_ambiguous() {
    let Some(server) = RedisServer::start("resend", &[]) else {
        return;
    };
    // Two fences, two connections, each used once before the restart.
    let one = RedisFence::builder()
        .url(server.url())
        .connect()
        .await
        .unwrap();
    let two = RedisFence::builder()
        .url(server.url())
        .connect()
        .await
        .unwrap();
    let domain = d("resend");
    put(&one, &domain, 1, "before").await.unwrap();
    two.claim(&domain, t(1)).await.unwrap();
    server.kill_and_restart();
    // The old connections died with the server. Each noticed (RESP3 reports the loss) and is
    // replaced, so the next request goes to the new server, not into a dead connection where
    // it would be ambiguous; a reconnect refused while the server was down is retried.
    let after = put(&one, &domain, 2, "after").await;
    assert!(after.is_ok(), "the first write after a restart: {after:?}");
    let claimed = two.claim(&domain, t(3)).await;
    assert!(
        claimed.is_ok(),
        "the first claim after a restart: {claimed:?}"
    );
    let snapshot = one.read(&domain).await.unwrap();
    assert_eq!(
        (
            snapshot.written_by(),
            snapshot.revision(),
            snapshot.high_water_mark
        ),
        (Some(t(2)), Some(Revision::new(2)), Some(t(3)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_ambiguous_and_both_ways_of_learning_the_outcome_work() {
    let Some(server) = RedisServer::start("cut", &[]) else {
        return;
    };
    let proxy = fence_conformance::proxy::TcpProxy::start(
        format!("127.0.0.1:{}", server.port).parse().unwrap(),
    )
    .await
    .unwrap();
    let fence = RedisFence::builder()
        .url(format!("redis://127.0.0.1:{}", proxy.port()))
        .connect()
        .await
        .unwrap();
    fence_conformance::ambiguity::cut_connections_are_ambiguous_and_learnable(
        &fence,
        &proxy,
        &d("cut"),
    )
    .await;
}

#[tokio::test]
async fn a_fenced_script_that_raises_is_rejected_not_retryable() {
    let Some(fence) = shared_fence("raises").await else {
        return;
    };
    let script = FencedScript::new("return redis.error_reply('ORDER-NOT-FOUND no such order')");
    let call = ScriptCall::new(d("raises"), t(1)).key("orders");
    match fence.run_script(&script, &call).await {
        Err(error @ FenceError::Backend { .. }) => {
            assert_eq!(
                error.backend_kind(),
                Some(fence_core::BackendErrorKind::Rejected),
                "{error}"
            );
            assert!(!error.is_retryable(), "the same script fails the same way");
            assert!(error.to_string().contains("ORDER-NOT-FOUND"), "{error}");
        }
        other => panic!("expected the script's own error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_op_id_is_replayed_within_its_window_and_new_again_after_it() {
    let Some(url) = support::shared_url() else {
        return;
    };
    let window = Duration::from_secs(30);
    let connect = || {
        RedisFence::builder()
            .url(&url)
            .prefix(support::unique_prefix("window"))
            .op_id_window(window)
    };
    let fence = connect().connect().await.unwrap();
    let other = RedisFence::builder()
        .url(&url)
        .prefix(fence.prefix())
        .connect()
        .await
        .unwrap();
    let domain = d("window");
    let request = WriteRequest::put(domain.clone(), t(1), "once")
        .with_op_id(OperationId::new("op-1").unwrap());
    let first = fence.write(&request).await.unwrap();
    assert_eq!(
        other.write(&request).await.unwrap(),
        fence_core::WriteOutcome::Duplicate(first.accepted().clone()),
        "another client replays it within the window"
    );
    // The record carries the window as its expiry; when it expires (forced here, instead of
    // waiting 30 s), the same op id is a new operation.
    let key = format!("{}:{{window}}:op:1:op-1", fence.prefix());
    let mut raw = support::raw(&url).await;
    let ttl: i64 = raw.pttl(&key).await.unwrap();
    assert!(
        ttl > 0 && ttl <= window.as_millis() as i64,
        "the record expires within the window: {ttl} ms"
    );
    let _: bool = raw.pexpire(&key, 1).await.unwrap();
    let key = key.as_str();
    fence_conformance::wait::until_async("the op record expires", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move { !raw.exists::<_, bool>(key).await.unwrap() }
    })
    .await;
    let again = fence.write(&request).await.unwrap();
    assert!(
        matches!(&again, fence_core::WriteOutcome::Accepted(a) if a.revision == Revision::new(2)),
        "after the window the op id is new: {again:?}"
    );
}

#[tokio::test]
async fn an_op_id_reused_for_another_kind_is_a_typed_error_and_changes_nothing() {
    let Some(fence) = shared_fence("op-kind").await else {
        return;
    };
    let domain = d("op-kind");
    let op = OperationId::new("pay-7").unwrap();
    let write = WriteRequest::put(domain.clone(), t(4), "paid").with_op_id(op.clone());
    fence.write(&write).await.unwrap();
    let script = FencedScript::new("return redis.call('INCR', KEYS[1])");
    let call = ScriptCall::new(domain.clone(), t(4))
        .key("n")
        .with_op_id(op.clone());
    match fence.run_script(&script, &call).await {
        Err(FenceError::InvalidInput(fence_core::InvalidInput::OpIdReused {
            op_id,
            first,
            now,
            ..
        })) => {
            assert_eq!(op_id, op);
            assert_eq!(first, fence_core::OpKind::Write);
            assert_eq!(now, fence_core::OpKind::Script);
        }
        other => panic!("expected a reused op id, got {other:?}"),
    }
    // The script did not run, and the write's own retry still replays.
    let counter = fence.user_key(&domain, "n").unwrap();
    let mut raw = support::raw(support::shared_url().as_deref().unwrap()).await;
    assert!(!raw.exists::<_, bool>(&counter).await.unwrap());
    assert!(fence.write(&write).await.unwrap().is_duplicate());
    // The other way round: a script's op id is not a write's.
    let script_op = ScriptCall::new(domain.clone(), t(4))
        .key("n")
        .with_op_id(OperationId::new("count-1").unwrap());
    fence.run_script(&script, &script_op).await.unwrap();
    let reused = WriteRequest::put(domain.clone(), t(4), "x")
        .with_op_id(OperationId::new("count-1").unwrap());
    assert!(matches!(
        fence.write(&reused).await,
        Err(FenceError::InvalidInput(
            fence_core::InvalidInput::OpIdReused { .. }
        ))
    ));
    assert_eq!(
        fence_conformance::services::value_of(&fence, &domain)
            .await
            .as_deref(),
        Some("paid")
    );
}

#[tokio::test]
async fn op_records_of_the_format_before_the_envelope_still_replay() {
    let Some(fence) = shared_fence("legacy-ops").await else {
        return;
    };
    let url = support::shared_url().unwrap();
    let mut raw = support::raw(&url).await;
    let domain = d("legacy");
    let key = |op: &str| format!("{}:{{legacy}}:op:1:{op}", fence.prefix());
    // A write's `revision:previous`, a script's `previous`, as the earlier release wrote them.
    let _: () = raw.set(key("w-op"), "1:").await.unwrap();
    let _: () = raw.set(key("s-op"), "").await.unwrap();
    let write = WriteRequest::put(domain.clone(), t(1), "again")
        .with_op_id(OperationId::new("w-op").unwrap());
    assert_eq!(
        fence.write(&write).await.unwrap(),
        fence_core::WriteOutcome::Duplicate(fence_core::Accepted::new(
            t(1),
            Revision::new(1),
            None
        ))
    );
    let script = FencedScript::new("return redis.call('INCR', KEYS[1])");
    let call = ScriptCall::new(domain.clone(), t(1))
        .key("n")
        .with_op_id(OperationId::new("s-op").unwrap());
    let replayed = fence.run_script(&script, &call).await.unwrap();
    assert!(replayed.duplicate && replayed.previous_high_water_mark.is_none());
    // Nothing ran: no value, no counter.
    assert!(fence_conformance::services::value_of(&fence, &domain)
        .await
        .is_none());
    let counter = fence.user_key(&domain, "n").unwrap();
    assert!(!raw.exists::<_, bool>(&counter).await.unwrap());
}
