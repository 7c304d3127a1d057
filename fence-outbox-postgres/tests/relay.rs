//! The relay on the PostgreSQL outbox against the shared server and a real local webhook
//! server that deduplicates by Idempotency-Key: exactly-once observed delivery in order across
//! a relay crash, a paused relay fenced by its successor, wake-ups by NOTIFY, SKIP LOCKED
//! around open writers, dead letters, and stale writers that record nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_core::{Domain, FenceError};
use fence_outbox::{Effect, EntryStatus, OutboxEntry, OutboxError};
use fence_postgres::{Begun, TransactionRequest};
use support::{
    all_settled, assert_exactly_once_in_order, delivered, domain, fast_relay, op, outbox, pay,
    relay, token, wait_for, webhook, WebhookServer,
};
use tokio::sync::{watch, Notify};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_once_in_order_despite_failures_and_a_relay_crash() {
    let Some(outbox) = outbox("exactly_once").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let domains: Vec<Domain> = (0..3).map(|i| domain(&format!("order-{i}"))).collect();
    let mut recorded = 0;
    for (d_index, d) in domains.iter().enumerate() {
        for n in 0..4 {
            let path = ["/ok", "/fail/2", "/lost/1", "/fail/1"][(d_index + n) % 4];
            let payload = format!("{}#{n}", d.as_str());
            let keys = pay(
                &outbox,
                d,
                token(1),
                &format!("pay-{n}"),
                &server.url(path),
                &payload,
            )
            .await
            .unwrap();
            recorded += keys.len();
        }
    }
    assert_eq!(recorded, 12);

    // Relay 1 is killed right after its 5th successful delivery, before it can mark it.
    let crashed = Arc::new(Notify::new());
    let crashing = Arc::new(support::CrashAfterDeliveries::new(
        webhook(),
        5,
        crashed.clone(),
    ));
    let first = relay(&outbox, crashing, fast_relay("relay-1")).spawn();
    crashed.notified().await;
    first.abort();
    // Relay 2 waits for relay 1's lease to expire (by the server's clock), then finishes.
    let second = relay(&outbox, webhook(), fast_relay("relay-2")).spawn();
    let entries = wait_for(&outbox, &domains, Duration::from_secs(30), |e| {
        e.len() == recorded && all_settled(e)
    })
    .await;
    let report = second.shutdown().await.unwrap();
    assert_eq!(delivered(&entries), recorded, "{entries:#?}");
    assert_exactly_once_in_order(&server, &entries);
    println!(
        "exactly-once: {recorded} entries, {} requests, relay 2: {report:?}",
        server.total_requests()
    );
    assert!(
        server.total_requests() > recorded as u64,
        "failures were injected"
    );
    assert!(
        server.requests_after_success() >= 1,
        "relay 1 was killed between a successful delivery and its mark"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_relay_cannot_complete_after_its_successor() {
    let Some(outbox) = outbox("zombie_relay").await else {
        return;
    };
    let server = WebhookServer::start().await;
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
    let config = fast_relay("relay-a")
        .lease_ttl(Duration::from_secs(120))
        .delivery_timeout(Duration::from_secs(60));
    let mut zombie = support::relay_result(&outbox, pausing, config).unwrap();
    let (_stop, stopped) = watch::channel(false);
    let zombie_run = tokio::spawn(async move {
        let report = zombie.run_once(&stopped).await;
        (report, zombie.token())
    });
    entered.notified().await;
    // Relay A is paused mid-delivery; its lease ends and relay B delivers and marks the entry.
    support::expire_relay_lease(&outbox).await;
    let successor = relay(&outbox, webhook(), fast_relay("relay-b")).spawn();
    wait_for(
        &outbox,
        std::slice::from_ref(&d),
        Duration::from_secs(10),
        all_settled,
    )
    .await;
    let b_report = successor.shutdown().await.unwrap();
    // A wakes up, sends its (duplicate) request, and tries to mark the entry done.
    release.notify_one();
    let (a_report, a_token) = zombie_run.await.unwrap();
    let entries = outbox.entries(&d).await.unwrap();
    assert_eq!(a_report.fenced, 1, "A's mark was refused: {a_report:?}");
    assert_eq!(a_report.delivered, 0, "A completed nothing");
    assert_eq!(a_token, None, "A dropped its lease");
    assert_eq!(b_report.delivered, 1);
    assert_eq!(
        server.applied().len(),
        1,
        "the receiver applied the effect once"
    );
    assert!(
        matches!(
            entries[0].status,
            EntryStatus::Delivered { attempts: 2, .. }
        ),
        "{entries:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_relay_is_woken_by_notify_not_by_polling() {
    let Some(outbox) = outbox("notify").await else {
        return;
    };
    let server = WebhookServer::start().await;
    // A poll interval far beyond the test's patience: only a notification can wake it.
    let config = fast_relay("relay")
        .lease_ttl(Duration::from_secs(120))
        .delivery_timeout(Duration::from_secs(5))
        .poll_interval(Duration::from_secs(600));
    let handle = relay(&outbox, webhook(), config).spawn();
    tokio::time::sleep(Duration::from_millis(500)).await; // idle: listening
    let d = domain("order-n");
    for n in 0..3 {
        let started = Instant::now();
        pay(
            &outbox,
            &d,
            token(1),
            &format!("p{n}"),
            &server.url("/ok"),
            "x",
        )
        .await
        .unwrap();
        let entries = wait_for(
            &outbox,
            std::slice::from_ref(&d),
            Duration::from_secs(5),
            |e| e.len() == n + 1 && all_settled(e),
        )
        .await;
        assert_eq!(delivered(&entries), n + 1);
        println!(
            "notify: entry {n} delivered {:?} after its commit",
            started.elapsed()
        );
    }
    let report = handle.shutdown().await.unwrap();
    assert_eq!(report.delivered, 3, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writers_open_transaction_holds_back_only_its_own_domain() {
    let Some(outbox) = outbox("skip_locked").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let (busy, free) = (domain("order-busy"), domain("order-free"));
    pay(&outbox, &busy, token(1), "a", &server.url("/ok"), "busy-1")
        .await
        .unwrap();
    // A writer of `busy` records a second effect and keeps its transaction open.
    let request = TransactionRequest::new(busy.clone(), token(1)).with_op_id(op("b"));
    let Begun::Admitted(mut open) = outbox.fence().begin(&request).await.unwrap() else {
        panic!("admitted");
    };
    let effect = Effect::new("send-receipt-email", server.url("/ok"), "busy-2");
    outbox.record(&mut open, &[effect]).await.unwrap();
    pay(&outbox, &free, token(1), "a", &server.url("/ok"), "free-1")
        .await
        .unwrap();

    // One domain at a time, the busy one first (domains are listed in name order): a relay
    // that waited for the writer's lock would never reach the free domain.
    let handle = relay(&outbox, webhook(), fast_relay("relay").concurrency(1)).spawn();
    let free_entries = wait_for(
        &outbox,
        std::slice::from_ref(&free),
        Duration::from_secs(10),
        all_settled,
    )
    .await;
    assert_eq!(
        delivered(&free_entries),
        1,
        "the relay did not wait behind the open writer"
    );
    let busy_entries = outbox.entries(&busy).await.unwrap();
    assert_eq!(
        busy_entries.len(),
        1,
        "the open transaction's entry is not visible"
    );
    assert!(
        matches!(
            busy_entries[0].status,
            EntryStatus::Pending { attempts: 0, .. }
        ),
        "the busy domain was skipped while its row was locked: {busy_entries:#?}"
    );
    open.commit().await.unwrap();
    let busy_entries = wait_for(
        &outbox,
        std::slice::from_ref(&busy),
        Duration::from_secs(10),
        |e| e.len() == 2 && all_settled(e),
    )
    .await;
    handle.shutdown().await.unwrap();
    assert_eq!(delivered(&busy_entries), 2);
    let order: Vec<String> = server
        .applied()
        .iter()
        .map(|a| String::from_utf8_lossy(&a.payload).into_owned())
        .collect();
    assert_eq!(order, ["free-1", "busy-1", "busy-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dead_letters_after_the_attempt_limit_and_the_domain_moves_on() {
    let Some(outbox) = outbox("dead_letter").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let d = domain("order-dl");
    for (op_id, path, payload) in [
        ("a", "/always-500", "doomed"),
        ("b", "/reject", "declined"),
        ("c", "/ok", "fine"),
    ] {
        pay(&outbox, &d, token(1), op_id, &server.url(path), payload)
            .await
            .unwrap();
    }
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
    assert_eq!(server.requests_for(entries[0].key.as_str()), 3);
    assert!(
        matches!(
            entries[1].status,
            EntryStatus::DeadLettered { attempts: 1, .. }
        ),
        "a 422 is permanent: {:?}",
        entries[1].status
    );
    assert!(matches!(entries[2].status, EntryStatus::Delivered { .. }));
    assert_eq!(report.dead_lettered, 2);
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
}

#[tokio::test]
async fn stale_or_rolled_back_writers_record_nothing() {
    let Some(outbox) = outbox("stale_writer").await else {
        return;
    };
    let d = domain("order-s");
    let url = "http://127.0.0.1:9/receipt";
    pay(&outbox, &d, token(2), "new", url, "by 2")
        .await
        .unwrap();
    match pay(&outbox, &d, token(1), "old", url, "by 1").await {
        Err(OutboxError::Fence(FenceError::Fenced {
            presented, current, ..
        })) => assert_eq!((presented, current), (token(1), token(2))),
        other => panic!("a stale writer: {other:?}"),
    }
    // A retry of a committed op id records nothing again.
    assert!(pay(&outbox, &d, token(2), "new", url, "again")
        .await
        .unwrap()
        .is_empty());
    // A transaction that records and then rolls back leaves nothing behind.
    let request = TransactionRequest::new(d.clone(), token(3)).with_op_id(op("rolled-back"));
    let Begun::Admitted(mut tx) = outbox.fence().begin(&request).await.unwrap() else {
        panic!("admitted");
    };
    outbox
        .record(&mut tx, &[Effect::new("send-receipt-email", url, "never")])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    // Without an op id, effects have no idempotency key: refused before any I/O.
    let plain = TransactionRequest::new(d.clone(), token(3));
    let Begun::Admitted(mut tx) = outbox.fence().begin(&plain).await.unwrap() else {
        panic!("admitted");
    };
    let refused = outbox
        .record(&mut tx, &[Effect::new("send-receipt-email", url, "x")])
        .await;
    assert!(
        matches!(refused, Err(OutboxError::Configuration(_))),
        "{refused:?}"
    );
    drop(tx);
    let entries: Vec<OutboxEntry> = outbox.entries(&d).await.unwrap();
    let payloads: Vec<&[u8]> = entries.iter().map(|e| &e.payload[..]).collect();
    assert_eq!(payloads, [&b"by 2"[..]]);
}
