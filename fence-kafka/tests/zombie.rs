//! Kafka-specific behaviour on the broker: zombie re-initialisation, open transactions aborted
//! by a newer claim, read_committed visibility, and the consumer-side filter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::kafka as support;

use fence_conformance::services::token as t;

use std::sync::Arc;
use std::time::Duration;

use fence_core::{AppendRequest, Domain, Fence, FenceError, FencedLog, Observed, Record};
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use fence_kafka::{Admission, FencedConsumer, KafkaFence, TokenFilter};

fn batch(domain: &Domain, token: u64, values: &[&str]) -> AppendRequest {
    AppendRequest::new(
        domain.clone(),
        t(token),
        values.iter().map(|v| Record::new(v.to_string())).collect(),
    )
}

/// A second process's view of the same topics: its own producers, nothing shared.
async fn other_process(fence: &Observed<KafkaFence>, bootstrap: &str) -> Observed<KafkaFence> {
    KafkaFence::builder(support::client_config(bootstrap))
        .data_topic(fence.data_topic())
        .ledger_topic(format!("{}-ledger", fence.data_topic()))
        .transactional_id_prefix(format!("{}-", fence.data_topic()))
        .connect()
        .await
        .unwrap()
}

async fn values(fence: &Observed<KafkaFence>, domain: &Domain) -> Vec<(String, u64)> {
    fence
        .read_log(domain)
        .await
        .unwrap()
        .iter()
        .map(|e| {
            (
                String::from_utf8_lossy(&e.record.value).into_owned(),
                e.token.get(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_zombie_reinit_cannot_evict_the_owner() {
    let Some(a) = support::shared_fence("zombie").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let b = other_process(&a, &bootstrap).await;
    let domain = Domain::new("partition-7").unwrap();

    a.claim(&domain, t(41)).await.unwrap();
    a.append(&batch(&domain, 41, &["a1"])).await.unwrap();
    println!("zombie: A claimed with 41 and appended a1");
    // A pauses; B takes over with 42: its init_transactions fences A's producer.
    b.claim(&domain, t(42)).await.unwrap();
    b.append(&batch(&domain, 42, &["b1"])).await.unwrap();
    println!("zombie: B claimed with 42 (init_transactions fenced A's producer) and appended b1");
    // A wakes up: its producer is fenced, it re-initialises (fencing B's producer in turn),
    // reads the ledger, and stops.
    let zombie = a.append(&batch(&domain, 41, &["a2-zombie"])).await;
    println!(
        "zombie: A wakes up, re-initialises and appends a2 -> {}",
        zombie
            .as_ref()
            .map_or_else(|e| e.to_string(), |o| format!("{o:?}"))
    );
    match zombie {
        Err(FenceError::Fenced {
            presented, current, ..
        }) => assert_eq!((presented, current), (t(41), t(42))),
        other => panic!("the zombie must be fenced, got {other:?}"),
    }
    // B's next append still succeeds: it re-claims automatically and continues.
    let next = b
        .append(&batch(&domain, 42, &["b2"]))
        .await
        .expect("the owner survives the zombie's re-init");
    println!(
        "zombie: B's producer was fenced by A's re-init; B re-claimed and appended b2 -> {next:?}"
    );
    let log = values(&b, &domain).await;
    println!("zombie: read_committed log {log:?}");
    assert_eq!(
        log,
        [
            ("a1".to_owned(), 41),
            ("b1".to_owned(), 42),
            ("b2".to_owned(), 42)
        ]
    );
    assert_eq!(b.high_water_mark(&domain).await.unwrap(), Some(t(42)));
}

#[tokio::test]
async fn an_open_transaction_is_aborted_by_a_newer_claim() {
    let Some(fence) = support::shared_fence("open-txn").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let domain = Domain::new("orders").unwrap();
    fence.claim(&domain, t(1)).await.unwrap();

    // A stalled holder with the domain's transactional id has an open transaction.
    let stalled: BaseProducer = support::client_config(&bootstrap)
        .set("transactional.id", fence.transactional_id(&domain))
        .create()
        .unwrap();
    stalled.init_transactions(Duration::from_secs(10)).unwrap();
    stalled.begin_transaction().unwrap();
    let partition = fence.data_partition(&domain).await.unwrap();
    let headers = support::fence_headers(domain.as_str(), Some("1"));
    stalled
        .send(
            BaseRecord::<[u8], [u8]>::to(fence.data_topic())
                .partition(partition)
                .payload(b"never visible")
                .headers(headers),
        )
        .unwrap();
    stalled.flush(Duration::from_secs(5)).unwrap();

    // The new owner claims: its init_transactions aborts the open transaction.
    let newer = other_process(&fence, &bootstrap).await;
    newer.claim(&domain, t(2)).await.unwrap();
    newer
        .append(&batch(&domain, 2, &["visible"]))
        .await
        .unwrap();
    assert!(
        stalled.commit_transaction(Duration::from_secs(10)).is_err(),
        "the stalled commit must fail"
    );
    assert_eq!(values(&newer, &domain).await, [("visible".to_owned(), 2)]);
}

#[tokio::test]
async fn the_consumer_filter_drops_stale_records_that_bypassed_the_fence() {
    let Some(fence) = support::shared_fence("filter").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let domain = Domain::new("sensor-3").unwrap();
    // Records written outside fence-kafka (a plain producer), stale one in the middle.
    let plain: BaseProducer = support::client_config(&bootstrap).create().unwrap();
    for (token, value) in [("7", "t7"), ("5", "t5-stale"), ("8", "t8")] {
        let headers = support::fence_headers(domain.as_str(), Some(token));
        plain
            .send(
                BaseRecord::<[u8], [u8]>::to(fence.data_topic())
                    .payload(value.as_bytes())
                    .headers(headers),
            )
            .unwrap();
    }
    plain
        .send(BaseRecord::<[u8], [u8]>::to(fence.data_topic()).payload(b"unfenced"))
        .unwrap();
    plain.flush(Duration::from_secs(5)).unwrap();

    let mut config: ClientConfig = support::client_config(&bootstrap);
    config
        .set("group.id", support::unique("filter-group"))
        .set("auto.offset.reset", "earliest");
    let mut consumer = FencedConsumer::new(&config, &[fence.data_topic()])
        .unwrap()
        .allow_unfenced(true);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let message = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .expect("records arrive")
            .unwrap();
        seen.push(String::from_utf8_lossy(&message.value[..]).into_owned());
    }
    assert_eq!(seen, ["t7", "t8", "unfenced"]);
    assert_eq!(consumer.filter().dropped(), 1);

    // By default a record without fence headers is not silently accepted: it is dropped and
    // counted. (A second group reads the same records.)
    config.set("group.id", support::unique("strict-group"));
    let mut strict = FencedConsumer::new(&config, &[fence.data_topic()]).unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let message = tokio::time::timeout(Duration::from_secs(20), strict.recv())
            .await
            .expect("records arrive")
            .unwrap();
        seen.push(String::from_utf8_lossy(&message.value[..]).into_owned());
    }
    assert_eq!(seen, ["t7", "t8"]);
    let late = tokio::time::timeout(Duration::from_secs(3), strict.recv()).await;
    assert!(late.is_err(), "nothing else is delivered: {late:?}");
    assert_eq!(
        (strict.filter().dropped(), strict.unfenced_dropped()),
        (1, 1)
    );

    config.set("isolation.level", "read_uncommitted");
    assert!(matches!(
        FencedConsumer::new(&config, &["x"]),
        Err(FenceError::InvalidInput(_))
    ));
    let mut filter = TokenFilter::new();
    assert_eq!(
        filter.admit(&fence_kafka::CommittedRecord::new("t", 0, 0, "plain")),
        Admission::Unfenced
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn separate_processes_race_with_mixed_tokens() {
    let Some(first) = support::shared_fence("process-race").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let domain = Domain::new("contended").unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    let start = Arc::new(tokio::sync::Barrier::new(3));
    for token in [5u64, 6, 7] {
        let fence = other_process(&first, &bootstrap).await;
        let (domain, start) = (domain.clone(), start.clone());
        tasks.spawn(async move {
            start.wait().await;
            let mut outcomes = Vec::new();
            for round in 0..4 {
                let value = format!("token {token} round {round}");
                let result = fence.append(&batch(&domain, token, &[&value])).await;
                outcomes.push((token, value, result));
            }
            outcomes
        });
    }
    let mut accepted = Vec::new();
    let mut fenced = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        for (token, value, result) in joined.unwrap() {
            match result {
                Ok(_) => accepted.push((value, token)),
                Err(FenceError::Fenced { current, .. }) => {
                    assert!(t(token) < current, "{value} fenced by {current}");
                    fenced.push(value);
                }
                Err(other) => panic!("{value}: {other}"),
            }
        }
    }
    assert_eq!(
        accepted.iter().filter(|(_, token)| *token == 7).count(),
        4,
        "every append of the greatest token lands"
    );
    let log = values(&first, &domain).await;
    assert_eq!(
        log.len(),
        accepted.len(),
        "read_committed shows exactly the accepted appends: {log:?}"
    );
    assert!(
        log.windows(2).all(|w| w[0].1 <= w[1].1),
        "tokens never go down along the log: {log:?}"
    );
    for (value, token) in &accepted {
        assert!(
            log.contains(&(value.clone(), *token)),
            "{value} accepted but not visible"
        );
    }
    for value in &fenced {
        assert!(
            !log.iter().any(|(v, _)| v == value),
            "{value} was fenced but is visible"
        );
    }
    assert_eq!(
        log.last().map(|(_, token)| *token),
        Some(7),
        "the log ends with the greatest token's appends"
    );
    assert_eq!(first.high_water_mark(&domain).await.unwrap(), Some(t(7)));
}

#[tokio::test]
async fn a_fenced_record_without_a_token_header_is_corrupt_state() {
    let Some(fence) = support::shared_fence("no-token").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let domain = Domain::new("orders").unwrap();
    fence.append(&batch(&domain, 1, &["good"])).await.unwrap();
    let plain: BaseProducer = support::client_config(&bootstrap).create().unwrap();
    let partition = fence.data_partition(&domain).await.unwrap();
    let headers = support::fence_headers(domain.as_str(), None);
    plain
        .send(
            BaseRecord::<[u8], [u8]>::to(fence.data_topic())
                .partition(partition)
                .payload(b"no token")
                .headers(headers),
        )
        .unwrap();
    plain.flush(Duration::from_secs(5)).unwrap();
    let read = fence.read_log(&domain).await;
    assert!(
        matches!(read, Err(FenceError::CorruptState { .. })),
        "{read:?}"
    );
}

/// `operation`, tried again (up to five times) while it fails with an error a retry can help, as
/// a holder would: on this loaded 2-core machine the broker sometimes leaves every connection
/// down for a moment (`AllBrokersDown`). Only an answer — accepted, or refused — ends it.
async fn answered<T, F, Fut>(mut operation: F) -> Result<T, FenceError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, FenceError>>,
{
    let mut outcome = operation().await;
    for _ in 0..5 {
        match &outcome {
            Err(error) if error.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                outcome = operation().await;
            }
            _ => break,
        }
    }
    outcome
}

/// Liveness under contention: `init_transactions` hands the epoch to whoever initialises last,
/// so claimants keep fencing each other's producers; the ledger claim must still end every
/// round with the highest token owning the domain, every lower holder fenced, in bounded time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_claimants_at_once_the_highest_always_owns_the_domain() {
    const ROUNDS: u64 = 20;
    /// A round's bound: the claim retry budget (16 aborted attempts, backoff doubling to 1 s)
    /// is spent in well under this; a livelock would not be.
    const ROUND_BOUND: Duration = Duration::from_secs(60);
    let Some(first) = support::shared_fence("claim-storm").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let mut holders = Vec::new();
    for _ in 0..16 {
        holders.push(other_process(&first, &bootstrap).await);
    }
    let mut slowest = Duration::ZERO;
    for round in 0..ROUNDS {
        let started = std::time::Instant::now();
        let domain = Domain::new(format!("storm-{round}")).unwrap();
        let start = Arc::new(tokio::sync::Barrier::new(holders.len()));
        let mut tasks = tokio::task::JoinSet::new();
        for (i, fence) in holders.iter().enumerate() {
            let (fence, domain, start) = (fence.clone(), domain.clone(), start.clone());
            let token = round * 100 + i as u64 + 1;
            tasks.spawn(async move {
                start.wait().await;
                (token, answered(|| fence.claim(&domain, t(token))).await)
            });
        }
        let highest = round * 100 + 16;
        let mut claimed = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            match joined.unwrap() {
                (token, Ok(_)) => claimed.push(token),
                (token, Err(FenceError::Fenced { current, .. })) => {
                    assert!(t(token) < current && current <= t(highest))
                }
                (token, Err(other)) => panic!(
                    "claim {token} must end claimed or fenced, got {other} (highest {highest})"
                ),
            }
        }
        assert!(
            claimed.contains(&highest),
            "round {round}: the highest claim must succeed; claimed {claimed:?}"
        );
        assert_eq!(
            first.high_water_mark(&domain).await.unwrap(),
            Some(t(highest)),
            "round {round}: the highest claimant owns the domain"
        );
        let claims_took = started.elapsed();
        // Its holder writes right away, and every lower holder is fenced.
        holders[15]
            .append(&batch(&domain, highest, &["by the highest"]))
            .await
            .unwrap();
        let mut stale = tokio::task::JoinSet::new();
        for (i, fence) in holders.iter().enumerate().take(15) {
            let (fence, domain) = (fence.clone(), domain.clone());
            let token = round * 100 + i as u64 + 1;
            stale.spawn(async move {
                let stale = batch(&domain, token, &["stale"]);
                (token, answered(|| fence.append(&stale)).await)
            });
        }
        while let Some(joined) = stale.join_next().await {
            match joined.unwrap() {
                (_, Err(FenceError::Fenced { current, .. })) => assert_eq!(current, t(highest)),
                (token, other) => {
                    panic!("round {round}: holder {token} below {highest}: {other:?}")
                }
            }
        }
        let values = values(&first, &domain).await;
        assert_eq!(values, vec![("by the highest".to_owned(), highest)]);
        let elapsed = started.elapsed();
        assert!(
            elapsed < ROUND_BOUND,
            "round {round} took {elapsed:?}: claims must settle in bounded time"
        );
        slowest = slowest.max(elapsed);
        println!("round {round}: claims {claims_took:?}, all {elapsed:?}");
    }
    println!("claim storm: {ROUNDS} rounds of 16 claimants, slowest round {slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_whose_commit_hangs_is_learned_by_a_retry_or_by_reading_the_log() {
    let Some(server) = fence_testkit::kafka_broker::KafkaServer::start("hang") else {
        return;
    };
    let config = support::client_config(&server.bootstrap());
    let topic = support::unique("hang");
    support::create_topic(&config, &topic).await;
    let fence = KafkaFence::builder(config)
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .timeout(Duration::from_secs(2))
        .aborted_retries(0)
        .connect()
        .await
        .unwrap();
    let domain = Domain::new("hang").unwrap();
    fence.append(&batch(&domain, 1, &["first"])).await.unwrap();

    // With an operation id: whatever the hang did, the retry applies it at most once.
    let request =
        batch(&domain, 1, &["second"]).with_op_id(fence_core::OperationId::new("op-2").unwrap());
    server.signal("STOP");
    let hung = fence.append(&request).await;
    server.signal("CONT");
    let hung = hung.expect_err("a broker that does not answer cannot confirm the append");
    assert!(
        hung.is_retryable(),
        "an outcome a retry can learn, not a final error: {hung}"
    );
    let mut retried = fence.append(&request).await;
    for _ in 0..20 {
        match &retried {
            Err(error) if error.is_retryable() => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                retried = fence.append(&request).await;
            }
            _ => break,
        }
    }
    let retried = retried.expect("the retry learns the outcome");
    println!(
        "hang: the append during SIGSTOP ended {}; the retry: {retried:?}",
        hung.outcome_label()
    );
    let log = values(&fence, &domain).await;
    assert_eq!(
        log.iter().filter(|(v, _)| v == "second").count(),
        1,
        "applied exactly once: {log:?}"
    );
    // Without one: read_committed shows a batch wholly or not at all, with its token.
    let plain = batch(&domain, 1, &["third-a", "third-b"]);
    server.signal("STOP");
    let hung = fence.append(&plain).await;
    server.signal("CONT");
    assert!(hung.is_err(), "{hung:?}");
    // The broker may still be catching up after SIGCONT: retry the read while it says so, and
    // fail on anything else (an empty log must not pass for one read in full).
    let mut attempts = 0;
    let log = loop {
        match fence.read_log(&domain).await {
            Ok(entries) => {
                break entries
                    .iter()
                    .map(|e| {
                        (
                            String::from_utf8_lossy(&e.record.value).into_owned(),
                            e.token.get(),
                        )
                    })
                    .collect::<Vec<_>>()
            }
            Err(error) if error.is_retryable() && attempts < 20 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => panic!("the log could not be read after the hang: {error}"),
        }
    };
    assert_eq!(
        log.iter().filter(|(v, _)| v == "second").count(),
        1,
        "the earlier batch is still there, once: {log:?}"
    );
    let a = log.iter().filter(|(v, _)| v == "third-a").count();
    let b = log.iter().filter(|(v, _)| v == "third-b").count();
    assert_eq!(a, b, "a batch is visible wholly or not at all: {log:?}");
    assert!(a <= 1, "{log:?}");
    assert!(log.iter().all(|(_, token)| *token == 1), "{log:?}");
}

#[tokio::test]
async fn a_claim_is_decided_at_the_ledger_not_by_what_this_process_saw() {
    let Some(a) = support::shared_fence("claim-ledger").await else {
        return;
    };
    let b = other_process(&a, &support::shared_bootstrap().unwrap()).await;
    let domain = Domain::new("claimed").unwrap();
    fence_conformance::services::claims_are_decided_at_the_resource(&a, &b, &domain).await;
}

#[tokio::test]
async fn the_last_op_ids_are_replayed_by_a_new_process_and_older_ones_are_new_again() {
    let Some(first) = support::shared_fence("retention").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let process = || {
        KafkaFence::builder(support::client_config(&bootstrap))
            .data_topic(first.data_topic())
            .ledger_topic(format!("{}-ledger", first.data_topic()))
            .transactional_id_prefix(format!("{}-", first.data_topic()))
            .op_id_retention(2)
            .build()
            .unwrap()
    };
    fence_conformance::retention::log_keeps_the_last_op_ids(
        &process(),
        &process(),
        &Domain::new("kept").unwrap(),
    )
    .await;
}
