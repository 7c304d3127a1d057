//! Recording effects in the fenced transition, against the real Redis (standalone and cluster).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::HashSet;
use std::sync::Arc;

use fence_core::{Fence, FenceError, Observed};
use fence_outbox::{EntryStatus, IdempotencyKey, OutboxError};
use fence_outbox_redis::{OutboxScript, RedisOutbox, RedisTransition};
use fence_redis::redis;
use fence_redis::RedisFence;
use support::{domain, op, outbox, pay, token};

async fn order_status(fence: &Observed<RedisFence>, d: &fence_core::Domain) -> Option<String> {
    let key = fence.user_key(d, "order").unwrap();
    let value = fence
        .query(redis::cmd("HGET").arg(key).arg("status"))
        .await
        .unwrap();
    redis::from_redis_value(value).unwrap()
}

async fn stale_transition_records_nothing(fence: Observed<RedisFence>) {
    let outbox = outbox(&fence);
    let d = domain("order-1");
    let first = pay(
        &outbox,
        &d,
        token(1),
        "pay",
        "https://mail.example/receipts",
        "r1",
    )
    .await
    .unwrap();
    assert_eq!(first.seqs, 1..=1);
    assert_eq!(
        first.keys,
        vec![IdempotencyKey::new(&d, token(1), &op("pay"), 0)]
    );
    // B takes over (token 2) and pays; A wakes up with token 1.
    fence.claim(&d, token(2)).await.unwrap();
    pay(
        &outbox,
        &d,
        token(2),
        "pay",
        "https://mail.example/receipts",
        "r2",
    )
    .await
    .unwrap();
    let stale = pay(
        &outbox,
        &d,
        token(1),
        "pay-again",
        "https://mail.example/receipts",
        "zombie",
    )
    .await;
    match stale {
        Err(OutboxError::Fence(FenceError::Fenced {
            presented, current, ..
        })) => {
            assert_eq!((presented.get(), current.get()), (1, 2));
        }
        other => panic!("a stale transition must be fenced, got {other:?}"),
    }
    let entries = outbox.entries(&d).await.unwrap();
    let payloads: Vec<_> = entries.iter().map(|e| e.payload.clone()).collect();
    println!("transition: entries after the zombie's attempt: {payloads:?}");
    assert_eq!(payloads, vec!["r1", "r2"], "the zombie recorded nothing");
    assert_eq!(order_status(&fence, &d).await.as_deref(), Some("paid by 2"));
    assert!(entries
        .iter()
        .all(|e| matches!(e.status, EntryStatus::Pending { attempts: 0, .. })));
}

#[tokio::test]
async fn standalone_stale_transition_records_nothing() {
    if let Some(fence) = support::standalone("stale").await {
        stale_transition_records_nothing(fence).await;
    }
}

#[tokio::test]
async fn cluster_stale_transition_records_nothing() {
    if let Some(fence) = support::cluster("stale").await {
        stale_transition_records_nothing(fence).await;
    }
}

#[tokio::test]
async fn a_retried_transition_records_its_effects_once() {
    let Some(fence) = support::standalone("retry").await else {
        return;
    };
    let outbox = outbox(&fence);
    let d = domain("order-2");
    let script = OutboxScript::new(
        "redis.call('HINCRBY', KEYS[1], 'paid_cents', ARGV[1]); return redis.call('HGET', KEYS[1], 'paid_cents')",
    );
    let transition = RedisTransition::new(d.clone(), token(3), op("pay-42"))
        .key("order")
        .arg("1999")
        .effect(fence_outbox::Effect::new(
            "charge-card",
            "https://pay.example/charges",
            "{\"cents\":1999}",
        ))
        .effect(fence_outbox::Effect::new(
            "send-receipt-email",
            "https://mail.example/r",
            "receipt",
        ));
    let first = outbox.transition(&script, &transition).await.unwrap();
    let again = outbox.transition(&script, &transition).await.unwrap();
    assert!(!first.duplicate && again.duplicate);
    assert_eq!(first.seqs, 1..=2);
    assert_eq!(
        again.seqs, first.seqs,
        "the retry reports the first run's entries"
    );
    assert_eq!(again.keys, first.keys);
    assert_eq!(first.result, fence_redis::ScriptValue::from("1999"));
    let entries = outbox.entries(&d).await.unwrap();
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert_eq!(entries[0].kind, "charge-card");
    assert_eq!(entries[1].key, first.keys[1]);
    let value = fence
        .query(
            redis::cmd("HGET")
                .arg(fence.user_key(&d, "order").unwrap())
                .arg("paid_cents"),
        )
        .await
        .unwrap();
    assert_eq!(
        value,
        redis::Value::BulkString(b"1999".to_vec()),
        "charged once"
    );
}

#[tokio::test]
async fn a_failing_state_change_records_no_entry_and_can_be_retried() {
    let Some(fence) = support::standalone("failing").await else {
        return;
    };
    let outbox = outbox(&fence);
    let d = domain("order-3");
    // INCR on a hash fails with WRONGTYPE: the script aborts after the mark, before the entries.
    fence
        .query(
            redis::cmd("HSET")
                .arg(fence.user_key(&d, "counter").unwrap())
                .arg("f")
                .arg("v"),
        )
        .await
        .unwrap();
    let failing = OutboxScript::new("return redis.call('INCR', KEYS[1])");
    let t = RedisTransition::new(d.clone(), token(1), op("count"))
        .key("counter")
        .effect(fence_outbox::Effect::new("enqueue", "audit", "counted"));
    let error = outbox.transition(&failing, &t).await.unwrap_err();
    println!("transition: failing state change -> {error}");
    assert!(outbox.entries(&d).await.unwrap().is_empty());
    fence
        .query(redis::cmd("DEL").arg(fence.user_key(&d, "counter").unwrap()))
        .await
        .unwrap();
    let retried = outbox.transition(&failing, &t).await.unwrap();
    assert!(!retried.duplicate, "the failed run left no op-id record");
    assert_eq!(outbox.entries(&d).await.unwrap().len(), 1);
}

async fn racing_writers_never_record_behind_a_newer_token(fence: Observed<RedisFence>) {
    let outbox = Arc::new(outbox(&fence));
    let d = domain("hot-order");
    let start = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for writer in 0..8u64 {
        let (outbox, start) = (outbox.clone(), start.clone());
        let d = d.clone();
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut accepted = Vec::new();
            for round in 0..40u64 {
                // Tokens interleave across writers and go backwards within a writer now and then.
                let t = 1 + (round * 8 + writer) % 97 + if round % 5 == 0 { 0 } else { round };
                let op_id = format!("w{writer}-r{round}");
                match pay(
                    &outbox,
                    &d,
                    token(t),
                    &op_id,
                    "https://mail.example/r",
                    &op_id,
                )
                .await
                {
                    Ok(recorded) => accepted.push((t, op_id, recorded.seqs)),
                    Err(e) if e.is_fenced() => {}
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
            accepted
        }));
    }
    let mut accepted = Vec::new();
    for task in tasks {
        accepted.extend(task.await.unwrap());
    }
    let entries = outbox.entries(&d).await.unwrap();
    assert_eq!(
        entries.len(),
        accepted.len(),
        "one entry per accepted transition"
    );
    let mut seen = HashSet::new();
    let mut highest = 0;
    for entry in &entries {
        assert!(
            entry.token.get() >= highest,
            "entry {} carries token {} after an entry of token {highest}",
            entry.seq,
            entry.token
        );
        highest = entry.token.get();
        assert!(
            seen.insert(entry.key.clone()),
            "duplicate key {}",
            entry.key
        );
    }
    let (last_token, _, last) = accepted
        .iter()
        .max_by_key(|(_, _, seqs)| *seqs.end())
        .unwrap();
    assert_eq!(
        fence.high_water_mark(&d).await.unwrap().map(|t| t.get()),
        Some(highest)
    );
    // Exactly the accepted transitions recorded entries, and the state is the last one's.
    let recorded: HashSet<_> = entries.iter().map(|e| e.payload.clone()).collect();
    let expected: HashSet<_> = accepted
        .iter()
        .map(|(_, op_id, _)| bytes::Bytes::from(op_id.clone()))
        .collect();
    assert_eq!(
        recorded, expected,
        "entries are exactly the accepted transitions"
    );
    assert_eq!(
        order_status(&fence, &d).await,
        Some(format!("paid by {last_token}")),
        "the state is the last accepted transition's"
    );
    println!(
        "race: {} transitions accepted of 320, entry tokens non-decreasing up to {highest}, last seq {}",
        accepted.len(),
        last.end()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standalone_racing_writers_never_record_behind_a_newer_token() {
    if let Some(fence) = support::standalone("race").await {
        racing_writers_never_record_behind_a_newer_token(fence).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_racing_writers_never_record_behind_a_newer_token() {
    if let Some(fence) = support::cluster("race").await {
        racing_writers_never_record_behind_a_newer_token(fence).await;
    }
}

#[tokio::test]
async fn effects_spread_over_partitions_stay_with_their_domain() {
    let Some(fence) = support::standalone("partitions").await else {
        return;
    };
    let outbox = RedisOutbox::with_config(
        fence.clone(),
        fence_outbox::OutboxConfig::new(support::kinds()).partitions(4),
    );
    let mut by_partition: std::collections::HashMap<u16, HashSet<fence_core::Domain>> =
        Default::default();
    for i in 0..16 {
        let d = domain(&format!("order-{i}"));
        by_partition
            .entry(outbox.config().partition_of(&d))
            .or_default()
            .insert(d.clone());
        pay(
            &outbox,
            &d,
            token(1),
            "pay",
            "https://mail.example/r",
            &d.to_string(),
        )
        .await
        .unwrap();
    }
    assert!(
        by_partition.len() > 1,
        "16 domains over 4 partitions use several: {by_partition:?}"
    );
    // Each partition's relay sees exactly its own domains (from the index and from a sweep),
    // and each domain's entry is its own.
    for partition in 0..4u16 {
        let expected = by_partition.get(&partition).cloned().unwrap_or_default();
        for sweep in [false, true] {
            let seen: HashSet<_> = fence_outbox::OutboxStore::candidates(&outbox, partition, sweep)
                .await
                .unwrap()
                .into_iter()
                .map(|c| c.domain)
                .collect();
            assert_eq!(seen, expected, "partition {partition} (sweep {sweep})");
        }
        for d in &expected {
            let entries = outbox.entries(d).await.unwrap();
            assert_eq!(entries.len(), 1, "{d}");
            assert_eq!(
                (&entries[0].domain, entries[0].payload.as_ref()),
                (d, d.as_str().as_bytes()),
                "{d}'s entry is its own"
            );
        }
    }
}

#[tokio::test]
async fn a_transition_replicas_did_not_acknowledge_is_unreplicated_until_they_do() {
    let Some(url) = support::redis_support::shared_url() else {
        return;
    };
    let prefix = support::unique_prefix("unreplicated");
    let fence = |replicas| {
        RedisFence::builder()
            .url(&url)
            .prefix(&prefix)
            .wait_for_replicas(replicas, std::time::Duration::from_millis(500))
            .build()
            .unwrap()
    };
    // The shared server has one replica: asking for two is never satisfied.
    let greedy = support::outbox(&fence(2));
    let order = support::domain("order-replicated");
    let url = "http://127.0.0.1:9/receipt";
    match support::pay(&greedy, &order, support::token(1), "pay-1", url, "r").await {
        Err(fence_outbox::OutboxError::Fence(
            error @ fence_core::FenceError::Unreplicated {
                requested: 2,
                acknowledged,
                ..
            },
        )) => assert!(acknowledged <= 1 && error.is_retryable()),
        other => panic!("expected Unreplicated, got {other:?}"),
    }
    // Applied once on the primary; the retry with the same op id replays and waits again.
    let retried = support::pay(
        &support::outbox(&fence(1)),
        &order,
        support::token(1),
        "pay-1",
        url,
        "r",
    )
    .await
    .unwrap();
    assert!(retried.duplicate, "{retried:?}");
    assert_eq!(retried.replicas_acknowledged, Some(1));
    assert_eq!(retried.seqs, 1..=1, "one entry recorded, once");
}
