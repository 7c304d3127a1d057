//! The torture run on a Kafka log: an Apache Kafka broker of the test's own behind a fault
//! proxy (it advertises the proxy's port, so every client connection crosses it), one
//! `KafkaFence` per worker (each its own producers, as separate processes would have, so
//! fencing between them is the broker's epochs and the fence ledger, not one client's
//! bookkeeping), tokens from leases on the shared Redis. Faults: workers frozen past their
//! lease; connections cut before, in and after a request and on the reply, delayed and
//! black-holed; the broker paused (SIGSTOP) mid-transaction. No kill -9 of this single node:
//! reloading after a crash, Apache Kafka can skip the markers of transactions it had
//! acknowledged or was ending, which leaves their partitions undecided until an operator
//! aborts them (fence-kafka then refuses to decide, fail closed; fence-kafka's README); crashes
//! are run on a three-node cluster (fence-kafka/tests/cluster_faults.rs).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::{Domain, Observed};
use fence_kafka::KafkaFence;
use fence_testkit::kafka as kafka_support;
use fence_testkit::kafka_broker::{BrokerOptions, KafkaServer};
use fence_torture::{engine, ProxyFaults, ServerProcess, Subject, Target};

struct Broker(Arc<KafkaServer>);

impl ServerProcess for Broker {
    fn kill_and_restart(&self) {
        self.0.restart();
    }

    fn signal(&self, signal: &str) {
        self.0.signal(signal);
    }
}

/// A client of the broker on the run's topics, with a deadline short enough that a paused
/// broker makes operations ambiguous inside the run's own deadline.
async fn client(bootstrap: &str, topic: &str) -> Observed<KafkaFence> {
    KafkaFence::builder(kafka_support::client_config(bootstrap))
        .data_topic(topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_log_holds_under_torture() {
    let (Some(broker), Some(redis)) = (
        KafkaServer::start_with("torture", BrokerOptions::new().behind_proxy()),
        fence_testkit::redis::shared_fence("torture-kafka").await,
    ) else {
        return;
    };
    let broker = Arc::new(broker);
    let bootstrap = broker.bootstrap();
    let proxy = broker.proxy().expect("the broker's fault proxy");
    let config = kafka_support::client_config(&bootstrap);
    let topic = kafka_support::unique("torture");
    kafka_support::create_topic(&config, &topic).await;
    let profile = support::log_profile(support::seed(61), Duration::from_millis(400));
    let mut clients = Vec::new();
    for _ in 0..profile.workers {
        clients.push(Subject::Log(Arc::new(client(&bootstrap, &topic).await)));
    }
    let target = Target::log(
        Arc::new(client(&bootstrap, &topic).await),
        Arc::new(redis.leases()),
        Domain::new("torture/kafka").unwrap(),
    )
    .with_clients_per_worker(clients)
    // A client refuses a token below a mark it saw accepted without asking the broker
    // (DESIGN.md §3.4), naming that mark: seen by another client first, it may not be the latest.
    .with_refusals_from_cache()
    .with_faults(Arc::new(
        ProxyFaults::new(proxy)
            .with_server(Arc::new(Broker(broker)))
            .with_pauses()
            .without_restarts(),
    ));
    let run = engine::run(&profile, &target).await;
    support::verify("kafka", &run, true);
    let log = run.history.final_log.as_ref().expect("the final log read");
    assert!(!log.is_empty(), "nothing was committed");
}
