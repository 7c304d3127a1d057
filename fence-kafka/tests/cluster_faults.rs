//! Broker faults on a three-node Apache Kafka cluster of the test's own (KRaft, each node a
//! broker and a controller; the transaction state log, the ledger and the data topic have 3
//! replicas, `min.insync.replicas` 2): the transaction coordinator's leader, the ledger's and
//! the data partition's leaders killed with kill -9 around takeovers, and the whole cluster
//! crashed and restarted on its data. After each, the zombie stays out: nothing of it is
//! visible to read_committed readers, and a stale token is fenced.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use fence_conformance::services::token as t;
use fence_core::{
    AppendRequest, Domain, Fence, FenceError, FencedLog, Observed, OperationId, Record,
};
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use fence_kafka::rdkafka::producer::{
    BaseRecord, DefaultProducerContext, Producer, ThreadedProducer,
};
use fence_kafka::KafkaFence;
use fence_testkit::kafka as support;
use fence_testkit::kafka_broker::KafkaCluster;

/// One cluster at a time: three JVMs each are plenty for two cores.
static ONE_CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The `__transaction_state` partition of `partitions` that coordinates `transactional_id`:
/// Kafka's `Utils.abs(id.hashCode()) % partitions`, with Java's string hash over UTF-16 units
/// (`Utils.abs` is the absolute value, 0 for `Integer.MIN_VALUE`).
fn coordinator_partition(transactional_id: &str, partitions: i32) -> i32 {
    let hash = transactional_id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    hash.checked_abs().unwrap_or(0) % partitions
}

#[test]
fn coordinator_partitions_follow_javas_string_hash() {
    // Java: "orders".hashCode() == -1008770331, "fence:a".hashCode() == -967725224: negative,
    // where masking the sign bit would pick another partition.
    assert_eq!(coordinator_partition("orders", 8), 1_008_770_331 % 8);
    assert_eq!(coordinator_partition("fence:a", 50), 967_725_224 % 50);
    assert_ne!(
        coordinator_partition("orders", 8),
        (-1_008_770_331i32 & 0x7fff_ffff) % 8
    );
    assert_eq!(coordinator_partition("", 8), 0);
}

/// The node leading `partition` of `topic` now (waits while it has none).
fn leader_of(config: &ClientConfig, topic: &str, partition: i32) -> u32 {
    let consumer: BaseConsumer = config.create().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leader = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()
            .and_then(|metadata| {
                let topic = metadata.topics().first()?;
                let found = topic.partitions().iter().find(|p| p.id() == partition)?;
                u32::try_from(found.leader()).ok()
            });
        if let Some(leader) = leader {
            return leader;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}/{partition} has no leader"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn batch(domain: &Domain, token: u64, value: &str) -> AppendRequest {
    AppendRequest::new(
        domain.clone(),
        t(token),
        vec![Record::new(value.to_owned())],
    )
}

/// Runs `attempt` again while it fails retryably (a broker fault may leave an attempt
/// unavailable or ambiguous, never applied twice), for up to four minutes (a node killed on
/// this 2-core machine once left metadata unavailable for over two minutes in a full run), its
/// last answer.
async fn retried<T, F, Fut>(mut attempt: F) -> Result<T, FenceError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, FenceError>>,
{
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        match attempt().await {
            Err(error) if error.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            answer => return answer,
        }
    }
}

/// Appends `request` (which carries an operation id) until it is applied or replayed.
async fn append_until_done(fence: &Observed<KafkaFence>, request: &AppendRequest) {
    if let Err(error) = retried(|| fence.append(request)).await {
        panic!("the owner's append failed for good: {error}");
    }
}

/// Claims until claimed.
async fn claim_until_done(fence: &Observed<KafkaFence>, domain: &Domain, token: u64) {
    if let Err(error) = retried(|| fence.claim(domain, t(token))).await {
        panic!("the claim of {token} failed for good: {error}");
    }
}

/// A stale process (its own producers, nothing cached) is fenced by `current`.
async fn assert_fenced(fence: &Observed<KafkaFence>, domain: &Domain, token: u64, current: u64) {
    let zombie = batch(domain, token, "zombie");
    match retried(|| fence.append(&zombie)).await {
        Err(FenceError::Fenced { current: seen, .. }) => assert_eq!(seen, t(current)),
        other => panic!("token {token} below {current} must be fenced, got {other:?}"),
    }
}

/// The values of `domain`'s committed log with their tokens (read_committed).
async fn log_of(fence: &Observed<KafkaFence>, domain: &Domain) -> Vec<(String, u64)> {
    match retried(|| fence.read_log(domain)).await {
        Ok(entries) => entries
            .iter()
            .map(|e| {
                let value = String::from_utf8_lossy(&e.record.value).into_owned();
                (value, e.token.get())
            })
            .collect(),
        Err(error) => panic!("reading the log failed for good: {error}"),
    }
}

/// A worker of another process that kept a producer of the domain's transactional id and has
/// produced a record with token `token` into an open transaction, not yet committed.
fn zombie_with_open_transaction(
    config: &ClientConfig,
    fence: &Observed<KafkaFence>,
    domain: &Domain,
    partition: i32,
    token: u64,
) -> ThreadedProducer<DefaultProducerContext> {
    let producer: ThreadedProducer<DefaultProducerContext> = config
        .clone()
        .set("transactional.id", fence.transactional_id(domain))
        .set("transaction.timeout.ms", "60000")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    let token = token.to_string();
    let headers = support::fence_headers(domain.as_str(), Some(&token));
    producer
        .send(
            BaseRecord::<[u8], [u8]>::to(fence.data_topic())
                .partition(partition)
                .payload(b"zombie")
                .headers(headers),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
    producer
}

/// A fence on `topic` of the cluster, as a separate process would open it.
fn process(config: &ClientConfig, topic: &str) -> Observed<KafkaFence> {
    support::fence_builder(config, topic).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_transaction_coordinators_leader_keeps_the_zombie_out() {
    let _one = ONE_CLUSTER.lock().await;
    let Some(cluster) = KafkaCluster::start("coordinator-kill") else {
        return;
    };
    let config = support::client_config(&cluster.bootstrap());
    let topic = support::unique("coordinator-kill");
    support::create_topic(&config, &topic).await;
    let owner = support::fence_on_topic(&config, &topic).await;
    let domain = Domain::new("orders").unwrap();
    owner.claim(&domain, t(5)).await.unwrap();
    owner.append(&batch(&domain, 5, "a-1")).await.unwrap();
    let partitions = cluster
        .property("transaction.state.log.num.partitions")
        .and_then(|n| n.parse().ok())
        .expect("the transaction log's partition count");
    let coordinator = coordinator_partition(&owner.transactional_id(&domain), partitions);
    let partition = owner.data_partition(&domain).await.unwrap();

    // Between a zombie's produce and its commit: the coordinator's leader dies, and the owner
    // takes over on the new coordinator.
    let zombie = zombie_with_open_transaction(&config, &owner, &domain, partition, 3);
    let leader = leader_of(&config, "__transaction_state", coordinator);
    cluster.kill(leader);
    let taker = process(&config, &topic);
    claim_until_done(&taker, &domain, 6).await;
    let committed =
        tokio::task::spawn_blocking(move || zombie.commit_transaction(Duration::from_secs(30)))
            .await
            .unwrap();
    assert!(
        committed.is_err(),
        "a zombie's commit after the owner's claim must fail"
    );
    tokio::task::block_in_place(|| cluster.start_node(leader));

    // Mid-transaction: the new coordinator's leader dies while the owner appends.
    let leader = leader_of(&config, "__transaction_state", coordinator);
    let request = batch(&domain, 6, "b-1").with_op_id(OperationId::new("b-1").unwrap());
    let appending = {
        let (taker, request) = (taker.clone(), request.clone());
        tokio::spawn(async move { taker.append(&request).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    cluster.kill(leader);
    let first = appending.await.unwrap();
    println!("coordinator killed mid-append: the append ended {first:?}");
    append_until_done(&taker, &request).await; // applied or replayed, once
    tokio::task::block_in_place(|| cluster.start_node(leader));

    assert_fenced(&process(&config, &topic), &domain, 5, 6).await;
    assert_eq!(
        log_of(&taker, &domain).await,
        vec![("a-1".to_owned(), 5), ("b-1".to_owned(), 6)],
        "the zombie's record is never visible; the owner's batch is there once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_ledger_and_data_leaders_during_takeovers_keeps_the_mark() {
    let _one = ONE_CLUSTER.lock().await;
    let Some(cluster) = KafkaCluster::start("leader-kill") else {
        return;
    };
    let config = support::client_config(&cluster.bootstrap());
    let topic = support::unique("leader-kill");
    support::create_topic(&config, &topic).await;
    let first = support::fence_on_topic(&config, &topic).await;
    let domain = Domain::new("partition-7").unwrap();
    first.append(&batch(&domain, 5, "t5")).await.unwrap();
    let ledger = format!("{topic}-ledger");

    // The ledger partition's leader dies as the second holder claims.
    let second = process(&config, &topic);
    let leader = leader_of(&config, &ledger, 0);
    let claiming = {
        let (second, domain) = (second.clone(), domain.clone());
        tokio::spawn(async move { second.claim(&domain, t(6)).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    cluster.kill(leader);
    println!(
        "ledger leader killed mid-claim: {:?}",
        claiming.await.unwrap()
    );
    claim_until_done(&second, &domain, 6).await;
    assert_fenced(&first, &domain, 5, 6).await;
    tokio::task::block_in_place(|| cluster.start_node(leader));

    // The data partition's leader dies as a third holder takes over with its first append.
    let partition = second.data_partition(&domain).await.unwrap();
    let third = process(&config, &topic);
    let leader = leader_of(&config, &topic, partition);
    let request = batch(&domain, 7, "t7").with_op_id(OperationId::new("t7").unwrap());
    let appending = {
        let (third, request) = (third.clone(), request.clone());
        tokio::spawn(async move { third.append(&request).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    cluster.kill(leader);
    println!(
        "data leader killed mid-takeover: {:?}",
        appending.await.unwrap()
    );
    append_until_done(&third, &request).await;
    assert_fenced(&second, &domain, 6, 7).await;
    assert_fenced(&process(&config, &topic), &domain, 5, 7).await;
    tokio::task::block_in_place(|| cluster.start_node(leader));
    assert_eq!(
        log_of(&third, &domain).await,
        vec![("t5".to_owned(), 5), ("t7".to_owned(), 7)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_whole_cluster_crash_keeps_a_pre_crash_zombie_fenced() {
    let _one = ONE_CLUSTER.lock().await;
    let Some(cluster) = KafkaCluster::start("cluster-crash") else {
        return;
    };
    assert_eq!(
        cluster.transaction_version(),
        fence_testkit::kafka_broker::transaction_version()
    );
    let config = support::client_config(&cluster.bootstrap());
    let topic = support::unique("cluster-crash");
    support::create_topic(&config, &topic).await;
    let owner = support::fence_on_topic(&config, &topic).await;
    let domain = Domain::new("ledger-owner").unwrap();
    let partition = owner.data_partition(&domain).await.unwrap();
    // The zombie initialised before the owner, which fences it by claiming.
    let zombie = zombie_with_open_transaction(&config, &owner, &domain, partition, 4);
    owner.claim(&domain, t(5)).await.unwrap();
    owner.append(&batch(&domain, 5, "before")).await.unwrap();
    assert_eq!(
        log_of(&owner, &domain).await,
        vec![("before".to_owned(), 5)]
    );

    let crashed = Instant::now();
    tokio::task::block_in_place(|| cluster.restart_all());
    println!(
        "whole cluster killed and serving again in {:?}",
        crashed.elapsed()
    );

    // The pre-crash producer is still fenced: the broker kept the epochs.
    let data_topic = topic.clone();
    let zombie_again = tokio::task::spawn_blocking(move || {
        let commit = zombie.commit_transaction(Duration::from_secs(30));
        let next = zombie.begin_transaction().and_then(|()| {
            zombie
                .send(BaseRecord::<[u8], [u8]>::to(&data_topic).payload(b"x"))
                .map_err(|(e, _)| e)?;
            zombie.commit_transaction(Duration::from_secs(30))
        });
        (commit, next)
    })
    .await
    .unwrap();
    assert!(zombie_again.0.is_err(), "{:?}", zombie_again.0);
    assert!(zombie_again.1.is_err(), "{:?}", zombie_again.1);

    assert_fenced(&process(&config, &topic), &domain, 4, 5).await;
    let after = process(&config, &topic);
    append_until_done(
        &after,
        &batch(&domain, 5, "after").with_op_id(OperationId::new("after").unwrap()),
    )
    .await;
    assert_eq!(
        log_of(&after, &domain).await,
        vec![("before".to_owned(), 5), ("after".to_owned(), 5)]
    );
}
