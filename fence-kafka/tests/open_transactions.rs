//! Reads of the ledger reach the partition's end, past other holders' open transactions.
//!
//! Every domain hashed to a ledger partition shares it, so another holder's transaction is
//! often open there. librdkafka reports the last stable offset, not the end, to a read_committed
//! client; a read that stopped there missed every mark committed after the open transaction,
//! and a zombie's append was accepted (found when the suite moved to Apache Kafka).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use fence_conformance::services::token as t;
use fence_core::{AppendRequest, Domain, FenceError, FencedLog, Record};
use fence_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use fence_kafka::rdkafka::message::Message;
use fence_kafka::rdkafka::producer::{
    BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use fence_kafka::rdkafka::{Offset, TopicPartitionList};
use fence_testkit::kafka as support;

type Raw = ThreadedProducer<DefaultProducerContext>;

fn transactional(config: &fence_kafka::rdkafka::ClientConfig, id: &str) -> Raw {
    let producer: Raw = config.clone().set("transactional.id", id).create().unwrap();
    producer.init_transactions(Duration::from_secs(20)).unwrap();
    producer
}

/// The one record of partition 0 of `topic` whose key is `key`, as (key, value) bytes.
fn committed_record(
    config: &fence_kafka::rdkafka::ClientConfig,
    topic: &str,
    key: &str,
) -> (Vec<u8>, Vec<u8>) {
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", "open-transactions-test")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            if message.key() == Some(key.as_bytes()) {
                return (key.as_bytes().to_vec(), message.payload().unwrap().to_vec());
            }
        }
    }
    panic!("no record with key {key} in {topic}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mark_committed_behind_another_open_transaction_still_fences_a_zombie() {
    let Some((config, topic)) = support::fresh_topic("behind-open", 1).await else {
        return;
    };
    let domain = Domain::new("claimed").unwrap();
    // The ledger record a claim of 9 writes, taken from a fence on scratch topics.
    let (scratch_config, scratch_topic) = support::fresh_topic("behind-open-scratch", 1)
        .await
        .unwrap();
    let scratch = support::fence_on_topic(&scratch_config, &scratch_topic).await;
    fence_core::Fence::claim(&scratch, &domain, t(9))
        .await
        .unwrap();
    let claim = committed_record(
        &scratch_config,
        &format!("{scratch_topic}-ledger"),
        "claimed",
    );

    let ledger = format!("{topic}-ledger");
    let owner = support::fence_on_topic(&config, &topic).await; // creates the ledger
    fence_core::Fence::claim(&owner, &Domain::new("other").unwrap(), t(1))
        .await
        .unwrap();
    // Another domain's holder opens a transaction on the ledger partition and stalls...
    let stalled = transactional(&config, &format!("{topic}-stalled"));
    stalled.begin_transaction().unwrap();
    stalled
        .send(BaseRecord::to(&ledger).key("unrelated").payload("open"))
        .map_err(|(e, _)| e)
        .unwrap();
    stalled.flush(Duration::from_secs(10)).unwrap();
    // ...while the claim of 9 commits after it.
    let claimant = transactional(&config, &format!("{topic}-claimant"));
    claimant.begin_transaction().unwrap();
    claimant
        .send(BaseRecord::to(&ledger).key(&claim.0).payload(&claim.1))
        .map_err(|(e, _)| e)
        .unwrap();
    claimant
        .commit_transaction(Duration::from_secs(20))
        .unwrap();

    // While the stalled transaction is open, the zombie decides nothing: the read of the
    // ledger cannot reach its end. (Stopping at the stable offset, it saw no mark: accepted.)
    let zombie = support::fence_builder(&config, &topic)
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let request = AppendRequest::new(domain.clone(), t(8), vec![Record::new("zombie")]);
    match zombie.append(&request).await {
        Err(error) if error.is_retryable() => {
            assert!(
                format!("{error}").contains("could not read partition"),
                "{error}"
            )
        }
        other => panic!("a zombie must decide nothing on a partial read of the ledger: {other:?}"),
    }
    // Once it is decided, the zombie's retry sees the claim of 9.
    tokio::task::spawn_blocking(move || stalled.abort_transaction(Duration::from_secs(20)))
        .await
        .unwrap()
        .unwrap();
    match zombie.append(&request).await {
        Err(FenceError::Fenced { current, .. }) => assert_eq!(current, t(9)),
        other => panic!(
            "a zombie with token 8 after a committed claim of 9 must be fenced, got {other:?}"
        ),
    }
    assert!(
        owner.read_log(&domain).await.unwrap().is_empty(),
        "nothing of the zombie's is visible"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_that_cannot_reach_the_end_fails_closed_and_says_why() {
    let Some((config, topic)) = support::fresh_topic("never-decided", 1).await else {
        return;
    };
    let fence = support::fence_builder(&config, &topic)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let domain = Domain::new("d").unwrap();
    fence_core::Fence::claim(&fence, &domain, t(1))
        .await
        .unwrap();
    let stalled = transactional(&config, &format!("{topic}-stalled"));
    stalled.begin_transaction().unwrap();
    stalled
        .send(
            BaseRecord::to(&format!("{topic}-ledger"))
                .key("x")
                .payload("open"),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    stalled.flush(Duration::from_secs(10)).unwrap();

    let error = fence_core::Fence::high_water_mark(&fence, &domain)
        .await
        .expect_err("a read stopped before the end decides nothing");
    assert!(error.is_retryable(), "{error}");
    let text = format!("{error}");
    assert!(text.contains("could not read partition 0"), "{text}");
    stalled.abort_transaction(Duration::from_secs(20)).unwrap();
    assert_eq!(
        fence_core::Fence::high_water_mark(&fence, &domain)
            .await
            .unwrap(),
        Some(t(1))
    );
}
