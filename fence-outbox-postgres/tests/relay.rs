//! The relay on the PostgreSQL outbox against the shared server and a real local webhook
//! server that deduplicates by Idempotency-Key: fence-testkit's relay contract (exactly-once
//! observed delivery in order across a relay crash, a paused relay fenced by its successor,
//! dead letters, stuck sinks, concurrency), plus wake-ups by NOTIFY, SKIP LOCKED around open
//! writers, and stale writers that record nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use fence_conformance::proxy::TcpProxy;
use fence_core::FenceError;
use fence_outbox::{Effect, EntryStatus, OutboxEntry, OutboxError};
use fence_outbox_postgres::PostgresOutbox;
use fence_postgres::{Begun, PostgresFence, TransactionRequest};
use support::{
    all_settled, delivered, domain, fast_relay, op, outbox, pay, relay, token, wait_for, webhook,
    WebhookServer,
};

fence_conformance::relay_contract_tests!(support::under_test);

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
    support::wait_until_listening(&outbox, 1).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn relays_of_every_partition_are_woken_by_their_own_notifications() {
    let Some(single) = outbox("notify_partitions").await else {
        return;
    };
    let config = fence_outbox::OutboxConfig::new(support::kinds()).partitions(2);
    let outbox = fence_outbox_postgres::PostgresOutbox::with_config(single.fence().clone(), config);
    let server = WebhookServer::start().await;
    // A domain of each partition.
    let mut domains: Vec<Option<fence_core::Domain>> = vec![None, None];
    for i in 0.. {
        let d = domain(&format!("order-{i}"));
        let slot = &mut domains[usize::from(outbox.config().partition_of(&d))];
        slot.get_or_insert(d);
        if domains.iter().all(Option::is_some) {
            break;
        }
    }
    let domains: Vec<fence_core::Domain> = domains.into_iter().flatten().collect();
    // Idle relays, one per partition, that would poll only every 10 minutes, from two clones of
    // the outbox (they share one listening connection).
    let relays: Vec<_> = (0..2u16)
        .map(|partition| {
            let config = fast_relay(&format!("relay-{partition}"))
                .partition(partition)
                .lease_ttl(Duration::from_secs(120))
                .delivery_timeout(Duration::from_secs(5))
                .poll_interval(Duration::from_secs(600));
            support::relay(&outbox.clone(), webhook(), config).spawn()
        })
        .collect();
    // Two clones of the outbox share one listening connection.
    support::wait_until_listening(&outbox, 1).await;
    for round in 0..2 {
        for d in &domains {
            pay(
                &outbox,
                d,
                token(1),
                &format!("p{round}"),
                &server.url("/ok"),
                "x",
            )
            .await
            .unwrap();
        }
        wait_for(&outbox, &domains, Duration::from_secs(5), |e| {
            e.len() == 2 * (round + 1) && all_settled(e)
        })
        .await;
    }
    for relay in relays {
        relay.shutdown().await.unwrap();
    }
    assert_eq!(server.applied().len(), 4);
}

/// A relay frozen inside a step (a GC pause, SIGSTOP, a blocked thread: here its connections
/// are held by a proxy right after its step's UPDATE ran) keeps its session idle in
/// transaction with the domain's row locked. The server ends that transaction after the
/// outbox's step timeout, so the relay holding the lease next delivers every entry of every
/// domain within a bound; when the frozen relay wakes, nothing it does lands twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_frozen_mid_step_does_not_stall_its_successor() {
    let Some(direct) = outbox("frozen").await else {
        return;
    };
    let step_timeout = Duration::from_secs(1);
    let direct = direct.with_step_timeout(step_timeout);
    let server = WebhookServer::start().await;
    let domains = [domain("order-f1"), domain("order-f2")];
    for d in &domains {
        for n in 0..2 {
            pay(
                &direct,
                d,
                token(1),
                &format!("p{n}"),
                &server.url("/ok"),
                "x",
            )
            .await
            .unwrap();
        }
    }
    // The frozen relay's outbox: the same schema, its connections through a proxy.
    let url = fence_testkit::postgres::shared_url().unwrap();
    let upstream = fence_testkit::postgres::address(&url);
    let proxy = TcpProxy::start(upstream.parse().unwrap()).await.unwrap();
    let proxied = url.replace(&upstream, &proxy.address().to_string());
    let schema = direct.fence().schema().to_owned();
    let frozen_outbox = PostgresOutbox::new(
        PostgresFence::builder(fence_testkit::postgres::pool(&proxied).await, &schema)
            .build()
            .unwrap(),
        support::kinds(),
    )
    .with_step_timeout(step_timeout);
    let entries_table = format!("{schema}.fence_outbox_entries");
    let pool = direct.fence().pool().clone();

    // Hold the first domain's head entry: the frozen relay's step locks the domain's row, then
    // waits there.
    let mut blocker = pool.begin().await.unwrap();
    sqlx::query(&format!(
        "SELECT 1 FROM {entries_table} WHERE domain = $1 AND seq = 1 FOR UPDATE"
    ))
    .bind(domains[0].as_str())
    .execute(&mut *blocker)
    .await
    .unwrap();
    let ttl = Duration::from_secs(2);
    let config = |owner: &str| {
        fast_relay(owner)
            .lease_ttl(ttl)
            .delivery_timeout(Duration::from_millis(800))
    };
    let frozen = relay(&frozen_outbox, webhook(), config("frozen")).spawn();
    fence_testkit::postgres::wait_for_sessions(
        &pool,
        "wait_event_type = 'Lock' AND position($1 in query) > 0",
        &entries_table,
        1,
        "the relay's step waiting on the held entry",
    )
    .await;
    proxy.hold();
    blocker.commit().await.unwrap();
    fence_testkit::postgres::wait_for_sessions(
        &pool,
        "state = 'idle in transaction' AND position($1 in query) > 0",
        &entries_table,
        1,
        "the frozen relay's step idle in transaction",
    )
    .await;
    let frozen_at = Instant::now();

    // Its successor takes the lease once the frozen relay's ends and delivers everything.
    let successor = relay(&direct, webhook(), config("successor")).spawn();
    let entries = wait_for(&direct, &domains, Duration::from_secs(20), |e| {
        e.len() == 4 && delivered(e) == 4
    })
    .await;
    println!(
        "frozen relay: every entry delivered {:?} after the relay froze (lease {ttl:?}, step timeout {step_timeout:?})",
        frozen_at.elapsed()
    );
    assert_eq!(delivered(&entries), 4);

    // The frozen relay wakes: its step was rolled back by the server and its lease is gone.
    proxy.forward();
    let woken = frozen.shutdown().await;
    let successor = successor.shutdown().await.unwrap();
    println!("frozen relay after waking: {woken:?}; successor: {successor:?}");
    let applied = server.applied();
    assert_eq!(applied.len(), 4, "each entry applied once: {applied:?}");
    let after = wait_for(&direct, &domains, Duration::from_secs(5), all_settled).await;
    assert_eq!(delivered(&after), 4);
}

/// Each relay group and partition has its own `fence_outbox_domains_with_work` gauge: a relay
/// of another group does not overwrite what a busy relay reported.
#[test]
fn each_relay_group_reports_its_own_work() {
    let recorder = fence_testkit::metrics::CountingRecorder::default();
    let ran = fence_testkit::metrics::recording(&recorder, async {
        {
            let Some(outbox) = outbox("gauge").await else {
                return false;
            };
            let server = WebhookServer::start().await;
            let d = domain("order-g");
            pay(&outbox, &d, token(1), "p0", &server.url("/ok"), "x")
                .await
                .unwrap();
            let (_stop, shutdown) = tokio::sync::watch::channel(false);
            for (group, delivered) in [("busy", 1), ("idle", 0)] {
                let mut config = fast_relay(group);
                config.name = group.to_owned();
                let report = relay(&outbox, webhook(), config).run_once(&shutdown).await;
                assert_eq!(report.delivered, delivered, "{group}: {report:?}");
            }
            true
        }
    });
    if !ran {
        return;
    }
    let gauge = |group: &str| {
        recorder.gauge(&format!(
            "fence_outbox_domains_with_work{{backend=postgres,relay={group},partition=0}}"
        ))
    };
    assert_eq!(gauge("busy"), Some(1.0), "{:#?}", recorder.counted());
    // The idle group's pass listed the domain too (its entry settled since): a value of its own.
    assert!(gauge("idle").is_some(), "{:#?}", recorder.counted());
}
