//! The relay on the PostgreSQL outbox against the shared server and a real local webhook
//! server that deduplicates by Idempotency-Key: fence-conformance's relay contract
//! (exactly-once observed delivery in order across a relay crash, a paused relay fenced by its
//! successor, dead letters, stuck sinks, concurrency, the relay torture run) and its SQL
//! scenarios (SKIP LOCKED around open writers, stale writers that record nothing, a relay
//! frozen mid-step), plus wake-ups by NOTIFY and per-group gauges.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::{Duration, Instant};

use support::{
    all_settled, delivered, domain, fast_relay, outbox, pay, relay, token, wait_for, webhook,
    WebhookServer,
};

fence_conformance::relay_contract_tests!(support::under_test);
fence_conformance::sql_relay_tests!(support::under_test);

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
