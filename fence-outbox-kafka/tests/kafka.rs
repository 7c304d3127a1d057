//! The Kafka outbox against the real broker (Apache Kafka): effects in the same transaction as
//! the state records, and the relay's fenced progress marks. Leases come from the real Redis.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::relay_kit as support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_conformance::services::{domain, token};
use fence_conformance::webhook::WebhookServer;
use fence_core::{Domain, FenceError, FencedLog, LeaseManager, Observed, Record};
use fence_outbox::{
    Effect, EntryStatus, OutboxConfig, OutboxEntry, OutboxError, Relay, RelayConfig, Sink,
    SinkError,
};
use fence_outbox_kafka::{
    KafkaOutbox, KafkaRelayStore, KafkaTransition, KEY_HEADER, PROGRESS_HEADER,
};
use fence_redis::RedisFence;
use fence_testkit::kafka::{fence_on_topic as fence, fresh_topic as fresh_topics};
use support::{fast_relay, op, webhook};
use tokio::sync::{watch, Notify};

fn pay(d: &Domain, t: u64, op_id: &str, url: &str, payload: &str) -> KafkaTransition {
    KafkaTransition::new(d.clone(), token(t), op(op_id))
        .record(Record::new(format!(
            "{{\"order\":\"{d}\",\"status\":\"paid\"}}"
        )))
        .effect(Effect::new("send-receipt-email", url, payload.to_owned()))
}

fn relay_on(
    store: KafkaRelayStore,
    leases: &Observed<RedisFence>,
    sink: Arc<dyn Sink>,
    config: RelayConfig,
) -> Relay {
    let leases: Arc<dyn LeaseManager> = Arc::new(leases.leases());
    Relay::new(Arc::new(store), sink, leases, config).unwrap()
}

async fn wait_settled(
    store: &KafkaRelayStore,
    domains: &[Domain],
    count: usize,
) -> Vec<OutboxEntry> {
    let started = std::time::Instant::now();
    loop {
        let mut all = Vec::new();
        for d in domains {
            all.extend(store.entries(d).await.unwrap());
        }
        let settled = all
            .iter()
            .all(|e| !matches!(e.status, EntryStatus::Pending { .. }));
        if all.len() == count && settled {
            return all;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not settled: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_fenced_transition_commits_no_effect_and_a_retry_commits_once() {
    let Some((config, topic)) = fresh_topics("kafka-stale", 1).await else {
        return;
    };
    let outbox = KafkaOutbox::with_config(
        fence(&config, &topic).await,
        OutboxConfig::new(support::kinds()),
    );
    let d = domain("order-k1");
    let first = outbox
        .transition(&pay(&d, 1, "pay", "https://mail.example/r", "r1"))
        .await
        .unwrap();
    let replay = outbox
        .transition(&pay(&d, 1, "pay", "https://mail.example/r", "r1"))
        .await
        .unwrap();
    assert!(!first.duplicate && replay.duplicate);
    // B takes over with token 2; A (token 1) wakes up and tries to pay again.
    outbox
        .transition(&pay(&d, 2, "pay", "https://mail.example/r", "r2"))
        .await
        .unwrap();
    let stale = outbox
        .transition(&pay(&d, 1, "pay-again", "https://mail.example/r", "zombie"))
        .await;
    assert!(
        matches!(stale, Err(OutboxError::Fence(FenceError::Fenced { .. }))),
        "{stale:?}"
    );
    // What a read_committed reader sees: two state records and two effects, none from A's retry.
    let log = outbox.fence().read_log(&d).await.unwrap();
    let effects: Vec<_> = log
        .iter()
        .filter(|e| e.record.headers.iter().any(|(k, _)| k == KEY_HEADER))
        .map(|e| (e.token.get(), e.record.value.clone()))
        .collect();
    println!(
        "kafka: committed effects {effects:?} of {} records",
        log.len()
    );
    assert_eq!(log.len(), 4);
    assert_eq!(effects, vec![(1, "r1".into()), (2, "r2".into())]);
    let bad = outbox
        .transition(&pay(&d, 3, "x", "gopher://mail.example", "x"))
        .await
        .unwrap_err();
    assert!(
        matches!(bad, OutboxError::InvalidDestination { .. }),
        "{bad:?}"
    );
}

#[tokio::test]
async fn the_relay_delivers_exactly_once_in_order_despite_failures_and_a_crash() {
    let Some((config, topic)) = fresh_topics("kafka-relay", 2).await else {
        return;
    };
    let Some(leases) = fence_testkit::redis::shared_fence("kafka-relay-leases").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = KafkaOutbox::with_config(
        fence(&config, &topic).await,
        OutboxConfig::new(support::kinds()),
    );
    let domains: Vec<Domain> = (0..3).map(|i| domain(&format!("order-{i}"))).collect();
    let paths = ["/ok", "/fail/2", "/lost/1", "/fail/1"];
    let mut count = 0;
    for (i, d) in domains.iter().enumerate() {
        for n in 0..3 {
            let url = server.url(paths[(i + n) % paths.len()]);
            outbox
                .transition(&pay(d, 1, &format!("pay-{n}"), &url, &format!("{d}#{n}")))
                .await
                .unwrap();
            count += 1;
        }
    }
    // Relay 1 is killed after its 3rd successful delivery, before marking it.
    let crashed = Arc::new(Notify::new());
    let crashing = Arc::new(support::CrashAfterDeliveries::new(
        webhook(),
        3,
        crashed.clone(),
    ));
    let first = relay_on(
        outbox.relay_store("kafka-test", 0).unwrap(),
        &leases,
        crashing,
        fast_relay("relay-1"),
    )
    .spawn();
    crashed.notified().await;
    first.abort();
    let applied_at_crash = server.applied().len();
    let second_outbox = KafkaOutbox::with_config(
        fence(&config, &topic).await,
        OutboxConfig::new(support::kinds()),
    );
    let second = relay_on(
        second_outbox.relay_store("kafka-test", 0).unwrap(),
        &leases,
        webhook(),
        fast_relay("relay-2"),
    )
    .spawn();
    let observer = outbox.relay_store("kafka-test", 0).unwrap();
    let entries = wait_settled(&observer, &domains, count).await;
    let report = second.shutdown().await.unwrap();
    let applied = server.applied();
    println!(
        "kafka exactly-once: {count} entries; {applied_at_crash} applied when relay 1 was killed; \
         {} requests; {} applied; relay 2 {report:?}",
        server.total_requests(),
        applied.len()
    );
    assert!(
        entries
            .iter()
            .all(|e| matches!(e.status, EntryStatus::Delivered { .. })),
        "{entries:#?}"
    );
    assert_eq!(applied.len(), count, "each effect applied exactly once");
    for d in &domains {
        let prefix = format!("{}:", d.escaped());
        let observed: Vec<_> = applied
            .iter()
            .filter(|a| a.key.starts_with(&prefix))
            .map(|a| a.payload.clone())
            .collect();
        let expected: Vec<_> = (0..3)
            .map(|n| bytes::Bytes::from(format!("{d}#{n}")))
            .collect();
        assert_eq!(observed, expected, "order of {d}");
    }
    assert!(server.total_requests() > count as u64);
    assert!(
        server.requests_after_success() >= 1,
        "relay 1 must have been killed between a successful delivery and its mark"
    );

    // Another consumer of the topic that skips the two outbox headers sees only business data.
    let reader = fence(&config, &topic).await;
    let (mut business, mut progress) = (0, 0);
    for partition in 0..reader.data_partition_count().await.unwrap() {
        for message in reader.read_committed(partition, 0).await.unwrap() {
            let has = |name: &str| message.header(name).is_some();
            if has(KEY_HEADER) {
                continue;
            }
            if has(PROGRESS_HEADER) {
                progress += 1;
                continue;
            }
            let value = &message.value;
            assert!(
                value.starts_with(b"{\"order\""),
                "an unmarked record that is not business data: {}",
                String::from_utf8_lossy(value)
            );
            business += 1;
        }
    }
    assert_eq!(business, count, "one state record per transition");
    assert!(progress > 0, "the relay's progress records are marked");
}

#[tokio::test]
async fn a_paused_relay_cannot_mark_after_its_successor() {
    let Some((config, topic)) = fresh_topics("kafka-zombie", 1).await else {
        return;
    };
    let Some(leases) = fence_testkit::redis::shared_fence("kafka-zombie-leases").await else {
        return;
    };
    let server = WebhookServer::start().await;
    let outbox = KafkaOutbox::with_config(
        fence(&config, &topic).await,
        OutboxConfig::new(support::kinds()),
    );
    let d = domain("order-z");
    outbox
        .transition(&pay(&d, 1, "pay", &server.url("/ok"), "receipt"))
        .await
        .unwrap();
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let pausing = Arc::new(support::PausingSink::new(
        webhook(),
        entered.clone(),
        release.clone(),
    ));
    let config_a = fast_relay("relay-a")
        .lease_ttl(Duration::from_secs(120))
        .delivery_timeout(Duration::from_secs(60));
    let mut zombie = relay_on(
        outbox.relay_store("kafka-test", 0).unwrap(),
        &leases,
        pausing,
        config_a,
    );
    let (_stop, stopped) = watch::channel(false);
    let zombie_run = tokio::spawn(async move {
        let report = zombie.run_once(&stopped).await;
        (report, zombie.token())
    });
    entered.notified().await;
    // A's lease ends while it is paused; B, another client, takes over and delivers.
    fence_testkit::redis::expire_lease(&leases, &fast_relay("x").lease_domain().unwrap()).await;
    let successor_outbox = KafkaOutbox::with_config(
        fence(&config, &topic).await,
        OutboxConfig::new(support::kinds()),
    );
    let successor = relay_on(
        successor_outbox.relay_store("kafka-test", 0).unwrap(),
        &leases,
        webhook(),
        fast_relay("relay-b"),
    )
    .spawn();
    let observer = outbox.relay_store("kafka-test", 0).unwrap();
    wait_settled(&observer, std::slice::from_ref(&d), 1).await;
    let b_report = successor.shutdown().await.unwrap();
    release.notify_one();
    let (a_report, a_token) = zombie_run.await.unwrap();
    println!(
        "kafka zombie relay: A {a_report:?}; B {b_report:?}; {} requests, {} applied",
        server.total_requests(),
        server.applied().len()
    );
    assert_eq!((a_report.fenced, a_report.delivered, a_token), (1, 0, None));
    assert_eq!(b_report.delivered, 1);
    assert_eq!(server.applied().len(), 1);
    let entries = observer.entries(&d).await.unwrap();
    assert!(
        matches!(
            entries[0].status,
            EntryStatus::Delivered { attempts: 2, .. }
        ),
        "{entries:#?}"
    );
}

/// A sink that never succeeds; the relay dead-letters after the attempt limit.
struct AlwaysDown;

#[async_trait]
impl Sink for AlwaysDown {
    async fn deliver(&self, _entry: &OutboxEntry) -> Result<(), SinkError> {
        Err(SinkError::retryable("mail service down"))
    }
}

#[tokio::test]
async fn dead_letters_after_the_attempt_limit() {
    let Some((config, topic)) = fresh_topics("kafka-dead", 1).await else {
        return;
    };
    let Some(leases) = fence_testkit::redis::shared_fence("kafka-dead-leases").await else {
        return;
    };
    let outbox = KafkaOutbox::with_config(
        fence(&config, &topic).await,
        OutboxConfig::new(support::kinds()),
    );
    let d = domain("order-d");
    outbox
        .transition(&pay(&d, 1, "pay", "https://mail.example/r", "r"))
        .await
        .unwrap();
    let retry =
        fence_outbox::RetryPolicy::new(3, Duration::from_millis(10), Duration::from_millis(30));
    let relay = relay_on(
        outbox.relay_store("kafka-test", 0).unwrap(),
        &leases,
        Arc::new(AlwaysDown),
        fast_relay("relay").retry(retry),
    )
    .spawn();
    let observer = outbox.relay_store("kafka-test", 0).unwrap();
    let entries = wait_settled(&observer, std::slice::from_ref(&d), 1).await;
    let report = relay.shutdown().await.unwrap();
    match &entries[0].status {
        EntryStatus::DeadLettered {
            attempts,
            last_error,
            ..
        } => {
            assert_eq!(*attempts, 3);
            assert!(last_error.contains("mail service down"), "{last_error}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!((report.retried, report.dead_lettered), (2, 1));
}

#[tokio::test]
async fn a_state_record_posing_as_an_effect_is_refused_before_any_io() {
    let mut config = fence_kafka::rdkafka::config::ClientConfig::new();
    config.set("bootstrap.servers", "127.0.0.1:1");
    let fence = fence_kafka::KafkaFence::builder(config)
        .data_topic("events")
        .build()
        .unwrap();
    let outbox = KafkaOutbox::with_config(fence, OutboxConfig::new(support::kinds()));
    for name in [KEY_HEADER, PROGRESS_HEADER] {
        let transition = KafkaTransition::new(domain("order-x"), token(1), op("pay"))
            .record(Record::new("state").with_header(name, "order-x:1:pay:0"));
        match outbox.transition(&transition).await {
            Err(OutboxError::InvalidName { value, .. }) => assert_eq!(value, name),
            other => panic!("a state record with {name} must be refused, got {other:?}"),
        }
    }
}
