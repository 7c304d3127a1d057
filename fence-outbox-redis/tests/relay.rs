//! The relay against the real Redis and a real local webhook server that deduplicates by
//! Idempotency-Key: exactly-once observed delivery, order, dead letters, zombie relays,
//! retention, sweeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::Domain;
use fence_outbox::{EntryStatus, OutboxEntry, OutboxStore};
use fence_outbox_redis::RedisOutbox;
use fence_redis::redis;
use support::{
    all_settled, assert_exactly_once_in_order, delivered, domain, fast_relay, outbox, pay, relay,
    token, wait_for, webhook, WebhookServer,
};
use tokio::sync::{watch, Notify};

/// Records `per_domain` payments on each of `domains`, alternating failure modes per effect.
async fn record_payments(
    outbox: &RedisOutbox,
    server: &WebhookServer,
    domains: &[Domain],
    per_domain: usize,
) -> usize {
    let mut recorded = 0;
    for (d_index, d) in domains.iter().enumerate() {
        for n in 0..per_domain {
            let path = match (d_index + n) % 4 {
                0 => "/ok".to_owned(),
                1 => "/fail/2".to_owned(),
                2 => "/lost/1".to_owned(),
                _ => "/fail/1".to_owned(),
            };
            let payload = format!("{}#{n}", d.as_str());
            pay(
                outbox,
                d,
                token(1),
                &format!("pay-{n}"),
                &server.url(&path),
                &payload,
            )
            .await
            .unwrap();
            recorded += 1;
        }
    }
    recorded
}

async fn exactly_once_despite_failures_and_crashes(fence: fence_redis::RedisFence) {
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let domains: Vec<Domain> = (0..3).map(|i| domain(&format!("order-{i}"))).collect();
    let recorded = record_payments(&outbox, &server, &domains, 4).await;

    // Relay 1 is killed right after its 5th successful delivery, before it can mark it: the
    // receiver has the effect, the outbox does not know.
    let crashed = Arc::new(Notify::new());
    let crashing = Arc::new(support::CrashAfterDeliveries::new(
        webhook(),
        5,
        crashed.clone(),
    ));
    let first = relay(&outbox, crashing, fast_relay("relay-1")).spawn();
    crashed.notified().await;
    first.abort();
    let after_crash = server.applied().len();

    // Relay 2 must wait for relay 1's lease to expire, then finishes the job.
    let second = relay(&outbox, webhook(), fast_relay("relay-2")).spawn();
    let entries = wait_for(&outbox, &domains, Duration::from_secs(30), |e| {
        e.len() == recorded && all_settled(e)
    })
    .await;
    let report = second.shutdown().await.unwrap();
    assert_eq!(delivered(&entries), recorded, "{entries:#?}");
    assert_exactly_once_in_order(&server, &entries);
    let attempts: u32 = entries.iter().map(OutboxEntry::attempts).sum();
    println!(
        "exactly-once: {recorded} entries; {} applied before relay 1 was killed; {} requests, \
         {attempts} attempts recorded, {} applied (each key once); relay 2: {report:?}",
        after_crash,
        server.total_requests(),
        server.applied().len()
    );
    assert!(
        server.total_requests() > recorded as u64,
        "failures were injected and retried"
    );
    assert!(
        after_crash >= 5,
        "relay 1 delivered at least 5 before it was killed"
    );
    // The kill landed mid-delivery: a delivery the receiver had answered with success was
    // unmarked, so relay 2 sent it again (and the receiver's dedup kept it applied once).
    assert!(
        server.requests_after_success() >= 1,
        "relay 1 must have been killed between a successful delivery and its mark"
    );
}

#[tokio::test]
async fn standalone_exactly_once_despite_failures_and_crashes() {
    if let Some(fence) = support::standalone("exactly-once").await {
        exactly_once_despite_failures_and_crashes(fence).await;
    }
}

#[tokio::test]
async fn cluster_exactly_once_despite_failures_and_crashes() {
    if let Some(fence) = support::cluster("exactly-once").await {
        exactly_once_despite_failures_and_crashes(fence).await;
    }
}

#[tokio::test]
async fn a_failing_head_holds_back_its_domain_only() {
    let Some(fence) = support::standalone("order").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let (slow, fast) = (domain("slow"), domain("fast"));
    pay(
        &outbox,
        &slow,
        token(1),
        "a",
        &server.url("/fail/4"),
        "slow-1",
    )
    .await
    .unwrap();
    pay(&outbox, &slow, token(1), "b", &server.url("/ok"), "slow-2")
        .await
        .unwrap();
    pay(&outbox, &fast, token(1), "a", &server.url("/ok"), "fast-1")
        .await
        .unwrap();
    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    let entries = wait_for(
        &outbox,
        &[slow.clone(), fast.clone()],
        Duration::from_secs(20),
        |e| e.len() == 3 && all_settled(e),
    )
    .await;
    let report = handle.shutdown().await.unwrap();
    let order: Vec<String> = server
        .applied()
        .iter()
        .map(|a| String::from_utf8_lossy(&a.payload).into_owned())
        .collect();
    println!("order: applied {order:?}; relay {report:?}");
    assert_eq!(delivered(&entries), 3);
    let position = |p: &str| order.iter().position(|o| o == p).unwrap();
    assert!(
        position("slow-1") < position("slow-2"),
        "slow-2 waited for slow-1"
    );
    assert!(
        position("fast-1") < position("slow-1"),
        "the fast domain was not held back"
    );
    assert_eq!(report.retried, 4);
    assert_eq!(
        server.requests_after_success(),
        0,
        "nothing is sent again once the receiver answered success"
    );
    assert_eq!(
        entries
            .iter()
            .find(|e| e.payload == "slow-1")
            .unwrap()
            .attempts(),
        5
    );
}

#[tokio::test]
async fn dead_letters_after_the_attempt_limit_and_the_domain_moves_on() {
    let Some(fence) = support::standalone("dead-letter").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let d = domain("order-dl");
    pay(
        &outbox,
        &d,
        token(1),
        "a",
        &server.url("/always-500"),
        "doomed",
    )
    .await
    .unwrap();
    pay(
        &outbox,
        &d,
        token(1),
        "b",
        &server.url("/reject"),
        "declined",
    )
    .await
    .unwrap();
    pay(&outbox, &d, token(1), "c", &server.url("/ok"), "fine")
        .await
        .unwrap();
    let config = fast_relay("relay").retry(fence_outbox::RetryPolicy::new(
        3,
        Duration::from_millis(10),
        Duration::from_millis(40),
    ));
    let handle = relay(&outbox, webhook(), config).spawn();
    let entries = wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(20),
        |e| e.len() == 3 && all_settled(e),
    )
    .await;
    let report = handle.shutdown().await.unwrap();
    match &entries[0].status {
        EntryStatus::DeadLettered {
            attempts,
            last_error,
            ..
        } => {
            assert_eq!(*attempts, 3);
            assert!(last_error.contains("500"), "{last_error}");
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
    assert_eq!(
        server.requests_for(entries[0].key.as_str()),
        3,
        "exactly N attempts"
    );
    match &entries[1].status {
        EntryStatus::DeadLettered {
            attempts,
            last_error,
            ..
        } => {
            assert_eq!(*attempts, 1, "a 422 is permanent: no retry");
            assert!(
                last_error.contains("422") && last_error.contains("declined"),
                "{last_error}"
            );
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
    assert!(matches!(entries[2].status, EntryStatus::Delivered { .. }));
    assert_eq!(report.dead_lettered, 2);
    // An operator lists the dead letters and discards one; a delivered entry is not one.
    assert_eq!(outbox.dead_letters(&d).await.unwrap().len(), 2);
    assert!(outbox.discard_dead_letter(&d, 1).await.unwrap());
    assert!(!outbox.discard_dead_letter(&d, 3).await.unwrap());
    let left: Vec<u64> = outbox
        .entries(&d)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(left, vec![2, 3]);
    println!("dead-letter: {:#?}", &entries[..2]);
}

#[tokio::test]
async fn a_stuck_sink_times_out_and_the_retry_lands_once() {
    let Some(fence) = support::standalone("stuck").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let d = domain("order-stuck");
    pay(
        &outbox,
        &d,
        token(1),
        "a",
        &server.url("/hang/2"),
        "eventually",
    )
    .await
    .unwrap();
    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    let entries = wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(20),
        all_settled,
    )
    .await;
    handle.shutdown().await.unwrap();
    assert!(
        matches!(
            entries[0].status,
            EntryStatus::Delivered { attempts: 3, .. }
        ),
        "{entries:#?}"
    );
    assert_eq!(server.applied().len(), 1);
    assert_eq!(server.requests_for(entries[0].key.as_str()), 3);
    assert_eq!(
        server.requests_after_success(),
        0,
        "nothing is sent again once the receiver answered success"
    );
}

#[tokio::test]
async fn a_paused_relay_cannot_complete_after_its_successor() {
    let Some(fence) = support::standalone("zombie-relay").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let d = domain("order-z");
    pay(&outbox, &d, token(1), "a", &server.url("/ok"), "receipt")
        .await
        .unwrap();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let pausing = Arc::new(support::PausingSink::new(
        webhook(),
        entered.clone(),
        release.clone(),
    ));
    let ttl = Duration::from_millis(300);
    let zombie_config = fast_relay("relay-a")
        .lease_ttl(ttl)
        .delivery_timeout(Duration::from_secs(60));
    // The delivery timeout is checked against the lease: a relay must not outlive it.
    assert!(support::relay_result(&outbox, pausing.clone(), zombie_config.clone()).is_err());
    let zombie_config = zombie_config
        .lease_ttl(Duration::from_secs(120))
        .delivery_timeout(Duration::from_secs(60));
    let mut zombie = support::relay_result(&outbox, pausing, zombie_config).unwrap();
    let (_stop, stopped) = watch::channel(false);
    let zombie_run = tokio::spawn(async move {
        let report = zombie.run_once(&stopped).await;
        (report, zombie.token())
    });
    entered.notified().await;
    // Relay A is paused mid-delivery. Its lease is taken over (the lease store expires it: here
    // we delete the lease key, as a TTL would) and relay B delivers and marks the entry.
    let lease_domain = fast_relay("x").lease_domain().unwrap();
    let lease_key = fence
        .user_key(&lease_domain, "x")
        .unwrap()
        .replace(":u:x", ":lease");
    fence
        .query(redis::cmd("DEL").arg(&lease_key))
        .await
        .unwrap();
    let successor = relay(&outbox, webhook(), fast_relay("relay-b")).spawn();
    wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        all_settled,
    )
    .await;
    let b_report = successor.shutdown().await.unwrap();
    // A wakes up, sends its (now duplicate) request, and tries to mark the entry done.
    release.notify_one();
    let (a_report, a_token) = zombie_run.await.unwrap();
    let entries = outbox.entries(&d).await.unwrap();
    println!("zombie relay: A {a_report:?} (token now {a_token:?}); B {b_report:?}; server saw {} requests, applied {}",
        server.total_requests(), server.applied().len());
    assert_eq!(a_report.fenced, 1, "A's mark was refused");
    assert_eq!(a_report.delivered, 0, "A completed nothing");
    assert_eq!(a_token, None, "A dropped its lease");
    assert_eq!(b_report.delivered, 1);
    assert_eq!(
        server.applied().len(),
        1,
        "the receiver applied the effect once"
    );
    assert_eq!(
        server.total_requests(),
        2,
        "A's late request was a deduplicated retry"
    );
    assert!(
        matches!(
            entries[0].status,
            EntryStatus::Delivered { attempts: 2, .. }
        ),
        "{entries:#?}"
    );
}

#[tokio::test]
async fn delivered_entries_are_kept_for_the_retention_window_then_purged() {
    let Some(fence) = support::standalone("retention").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let d = domain("order-r");
    pay(&outbox, &d, token(1), "a", &server.url("/ok"), "one")
        .await
        .unwrap();
    pay(&outbox, &d, token(1), "b", &server.url("/reject"), "dead")
        .await
        .unwrap();
    let retention = Duration::from_millis(3000);
    let config = fast_relay("relay")
        .retention(retention)
        .sweep_interval(Duration::from_millis(100));
    let handle = relay(&outbox, webhook(), config).spawn();
    let settled = wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        |e| e.len() == 2 && all_settled(e),
    )
    .await;
    let at = match settled[0].status {
        EntryStatus::Delivered { at_ms, .. } => at_ms,
        ref other => panic!("{other:?}"),
    };
    // Inside the window (read right after settling, far inside 3 s) the delivered entry is
    // still there, with its key.
    let kept = outbox.entries(&d).await.unwrap();
    let read_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        read_at < at + 3000,
        "the read came {} ms after delivery, past the window: the machine stalled",
        read_at - at
    );
    assert_eq!(kept.len(), 2, "kept within the window");
    let index = outbox.fence().prefix().to_owned() + ":outbox:{p0}:index";
    let remaining = wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        |e| e.len() == 1,
    )
    .await;
    assert!(
        matches!(remaining[0].status, EntryStatus::DeadLettered { .. }),
        "dead letters stay"
    );
    // Nothing pending or retained: the domain leaves the index and the sweeps stop adding it.
    let started = std::time::Instant::now();
    loop {
        let indexed: Vec<String> =
            redis::from_redis_value(fence.query(redis::cmd("HKEYS").arg(&index)).await.unwrap())
                .unwrap();
        if indexed.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "still indexed: {indexed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.unwrap();
    println!(
        "retention: delivered at {at} ms, purged after the {retention:?} window; dead letter kept"
    );
    // A replay of the first transition is still a duplicate (op-id retention, 24 h by default).
    let replay = pay(&outbox, &d, token(1), "a", &server.url("/ok"), "one")
        .await
        .unwrap();
    assert!(replay.duplicate && outbox.entries(&d).await.unwrap().len() == 1);
}

#[tokio::test]
async fn the_sweep_finds_a_domain_whose_index_hint_was_lost() {
    let Some(fence) = support::cluster("sweep").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = outbox(&fence);
    let domains: Vec<Domain> = (0..6).map(|i| domain(&format!("lost-{i}"))).collect();
    for d in &domains {
        pay(&outbox, d, token(1), "a", &server.url("/ok"), d.as_str())
            .await
            .unwrap();
    }
    // As if every writer crashed between the transition and the index hint.
    let index = outbox.fence().prefix().to_owned() + ":outbox:{p0}:index";
    fence.query(redis::cmd("DEL").arg(&index)).await.unwrap();
    assert!(outbox.candidates(0, false).await.unwrap().is_empty());
    let found = outbox.candidates(0, true).await.unwrap();
    assert_eq!(
        found.len(),
        6,
        "the sweep walks every cluster master: {found:?}"
    );
    let handle = relay(&outbox, webhook(), fast_relay("relay")).spawn();
    wait_for(&outbox, &domains, Duration::from_secs(10), |e| {
        e.len() == 6 && all_settled(e)
    })
    .await;
    handle.shutdown().await.unwrap();
    assert_eq!(server.applied().len(), 6);
}

/// A sink that takes a while and records how many deliveries overlapped.
struct SlowSink {
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    /// Every delivery as it started and ended: (domain, payload, started).
    log: std::sync::Mutex<Vec<(Domain, bytes::Bytes, bool)>>,
}

#[async_trait::async_trait]
impl fence_outbox::Sink for SlowSink {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), fence_outbox::SinkError> {
        use std::sync::atomic::Ordering::SeqCst;
        let note = |started| {
            self.log
                .lock()
                .unwrap()
                .push((entry.domain.clone(), entry.payload.clone(), started))
        };
        note(true);
        let now = self.in_flight.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::time::sleep(Duration::from_millis(150)).await;
        self.in_flight.fetch_sub(1, SeqCst);
        note(false);
        Ok(())
    }
}

#[tokio::test]
async fn domains_are_served_concurrently_each_in_order() {
    let Some(fence) = support::standalone("concurrency").await else {
        return;
    };
    let outbox = outbox(&fence);
    let domains: Vec<Domain> = (0..6).map(|i| domain(&format!("order-{i}"))).collect();
    for d in &domains {
        for n in 0..3 {
            pay(
                &outbox,
                d,
                token(1),
                &format!("pay-{n}"),
                "https://mail.example/r",
                &format!("{d}#{n}"),
            )
            .await
            .unwrap();
        }
    }
    let sink = Arc::new(SlowSink {
        in_flight: std::sync::atomic::AtomicUsize::new(0),
        most: std::sync::atomic::AtomicUsize::new(0),
        log: Default::default(),
    });
    let handle = relay(&outbox, sink.clone(), fast_relay("relay").concurrency(4)).spawn();
    let entries = wait_for(&outbox, &domains, Duration::from_secs(20), |e| {
        e.len() == 18 && all_settled(e)
    })
    .await;
    handle.shutdown().await.unwrap();
    let most = sink.most.load(std::sync::atomic::Ordering::SeqCst);
    println!("concurrency: at most {most} deliveries at once (limit 4), 18 delivered");
    assert_eq!(delivered(&entries), 18);
    assert!(
        (2..=4).contains(&most),
        "domains overlap, within the limit: {most}"
    );
    // Within a domain, each delivery starts only after the previous one ended, in order.
    let log = sink.log.lock().unwrap().clone();
    for d in &domains {
        let events: Vec<_> = log
            .iter()
            .filter(|(domain, _, _)| domain == d)
            .map(|(_, payload, started)| (String::from_utf8_lossy(payload).into_owned(), *started))
            .collect();
        let expected: Vec<_> = (0..3)
            .flat_map(|n| [(format!("{d}#{n}"), true), (format!("{d}#{n}"), false)])
            .collect();
        assert_eq!(
            events, expected,
            "{d} is served one entry at a time, in order"
        );
    }
}
