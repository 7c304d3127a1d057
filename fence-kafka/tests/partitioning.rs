//! Where domains' records go on the data topic, on the shared broker: explicit partitions,
//! the producer's own key partitioning (with the domain's order kept by `fence-seq`), and a
//! partition count that changed under domain-hash placement, refused loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;

use fence_core::{
    AppendRequest, BackendErrorKind, Domain, Fence, FenceError, FencedLog, FencingToken, Observed,
    Record,
};
use fence_kafka::{KafkaFence, KafkaFenceError, Partitioning, SEQ_HEADER};
use fence_testkit::kafka as support;

fn t(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn keyed(domain: &Domain, token: u64, keys: &[&str]) -> AppendRequest {
    AppendRequest::new(
        domain.clone(),
        t(token),
        keys.iter()
            .map(|k| Record::new(format!("value of {k}")).with_key(k.to_string()))
            .collect(),
    )
}

/// A fence on a fresh data topic of `partitions` partitions (and its own ledger).
async fn fence_with(
    test: &str,
    partitions: i32,
    partitioning: Partitioning,
) -> Option<(
    Observed<KafkaFence>,
    fence_kafka::rdkafka::ClientConfig,
    String,
)> {
    let (config, topic) = support::fresh_topic(test, partitions).await?;
    let fence = KafkaFence::builder(config.clone())
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .partitioning(partitioning)
        .connect()
        .await
        .unwrap();
    Some((fence, config, topic))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_partitions_hold_their_domains() {
    let pick = Partitioning::explicit(|d| d.as_str().strip_prefix("p-")?.parse().ok());
    let Some((fence, _, _)) = fence_with("explicit", 4, pick).await else {
        return;
    };
    let domain = Domain::new("p-2").unwrap();
    fence.append(&keyed(&domain, 3, &["a", "b"])).await.unwrap();
    assert_eq!(fence.data_partition(&domain).await.unwrap(), 2);
    let in_two = fence.read_committed(2, 0).await.unwrap();
    assert_eq!(in_two.len(), 2);
    for other in [0, 1, 3] {
        assert!(fence.read_committed(other, 0).await.unwrap().is_empty());
    }
    assert_eq!(fence.read_log(&domain).await.unwrap().len(), 2);
    // A domain the function places nowhere, or past the topic's partitions: refused, unsent.
    for nowhere in ["elsewhere", "p-9"] {
        let refused = fence
            .append(&keyed(&Domain::new(nowhere).unwrap(), 3, &["x"]))
            .await;
        assert!(
            matches!(refused, Err(FenceError::InvalidInput(_))),
            "{nowhere}: {refused:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_keys_choose_partitions_and_the_sequence_keeps_the_order() {
    let Some((fence, config, topic)) = fence_with("record-key", 3, Partitioning::RecordKey).await
    else {
        return;
    };
    let domain = Domain::new("orders").unwrap();
    let keys = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];
    fence.append(&keyed(&domain, 3, &keys[..4])).await.unwrap();
    // Another process continues the domain's sequence from the ledger.
    let other = KafkaFence::builder(config.clone())
        .data_topic(&topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .partitioning(Partitioning::RecordKey)
        .build()
        .unwrap();
    other.append(&keyed(&domain, 4, &keys[4..])).await.unwrap();

    let mut used = BTreeSet::new();
    let mut seqs = Vec::new();
    for partition in 0..3 {
        for record in fence.read_committed(partition, 0).await.unwrap() {
            used.insert(partition);
            seqs.push(
                record
                    .header_text(SEQ_HEADER)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            );
        }
    }
    assert!(used.len() > 1, "eight keys all in one partition: {used:?}");
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    let log = fence.read_log(&domain).await.unwrap();
    let values: Vec<String> = log
        .iter()
        .map(|e| String::from_utf8(e.record.value.to_vec()).unwrap())
        .collect();
    let expected: Vec<String> = keys.iter().map(|k| format!("value of {k}")).collect();
    assert_eq!(values, expected, "the domain's order, across partitions");
    assert_eq!(
        log.iter().map(|e| e.token.get()).collect::<Vec<_>>(),
        [3, 3, 3, 3, 4, 4, 4, 4]
    );
    assert!(matches!(
        fence.data_partition(&domain).await,
        Err(FenceError::InvalidInput(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_partitions_are_refused_under_domain_hash_and_allowed_otherwise() {
    let Some((fence, config, topic)) = fence_with("grown", 2, Partitioning::DomainHash).await
    else {
        return;
    };
    let domain = Domain::new("orders").unwrap();
    fence.append(&keyed(&domain, 3, &["a"])).await.unwrap();
    support::add_partitions(&config, &topic, 3).await;

    // A new process sees 3 partitions where the ledger's layout says 2: nothing is done.
    let fresh = || {
        KafkaFence::builder(config.clone())
            .data_topic(&topic)
            .ledger_topic(format!("{topic}-ledger"))
            .transactional_id_prefix(format!("{topic}-"))
    };
    let refused = fresh().build().unwrap().claim(&domain, t(4)).await;
    match refused {
        Err(ref error @ FenceError::Backend { kind, .. }) => {
            assert_eq!(kind, BackendErrorKind::Rejected, "{error}");
            assert!(!error.is_retryable());
            let source =
                std::error::Error::source(error).and_then(|s| s.downcast_ref::<KafkaFenceError>());
            assert!(
                matches!(
                    source,
                    Some(KafkaFenceError::PartitionsChanged { was: 2, now: 3, .. })
                ),
                "{error}"
            );
            println!("{error}");
        }
        other => panic!("a grown topic must be refused: {other:?}"),
    }
    assert!(fresh().connect().await.is_err(), "connect refuses it too");
    // The process that started before keeps its own consistent placement.
    fence.append(&keyed(&domain, 3, &["b"])).await.unwrap();
    // Explicit placement does not depend on the count: the grown topic is fine for it.
    let explicit = fresh()
        .partitioning(Partitioning::explicit(|_| Some(0)))
        .connect()
        .await
        .unwrap();
    explicit.claim(&domain, t(4)).await.unwrap();

    // The ledger grown: refused whatever the data partitioning.
    support::add_partitions(&config, &format!("{topic}-ledger"), 2).await;
    let refused = fresh()
        .partitioning(Partitioning::explicit(|_| Some(0)))
        .build()
        .unwrap()
        .claim(&domain, t(5))
        .await;
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("-ledger` has 2 partitions")),
        "{refused:?}"
    );
}
