//! The torture run on a Kafka log: a noida-db broker of the test's own, one `KafkaFence` per
//! worker (each its own producers, as separate processes would have, so fencing between them
//! is the broker's epochs and the fence ledger, not one client's bookkeeping), tokens from
//! leases on the shared Redis. Faults: workers frozen past their lease and the broker paused
//! (SIGSTOP) mid-transaction. No kill -9: noida-db forgets producer epochs on restart
//! (SERVICES.md), so a pre-restart zombie's commit would go through — its limit, documented in
//! RELIABILITY.md, not a property of Apache Kafka.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use fence_core::Domain;
use fence_kafka::KafkaFence;
use fence_testkit::kafka::{self as kafka_support, NoidaServer};
use fence_torture::{engine, ServerFaults, ServerProcess, Subject, Target};

struct Broker(NoidaServer);

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
async fn client(bootstrap: &str, topic: &str) -> KafkaFence {
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
        NoidaServer::start("torture"),
        fence_testkit::redis::shared_fence("torture-kafka").await,
    ) else {
        return;
    };
    let bootstrap = broker.bootstrap();
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
    // (DESIGN.md §8), naming that mark: seen by another client first, it may not be the latest.
    .with_refusals_from_cache()
    .with_faults(Arc::new(ServerFaults::new(Arc::new(Broker(broker)))));
    let run = engine::run(&profile, &target).await;
    support::verify("kafka", &run, true);
    let log = run.history.final_log.as_ref().expect("the final log read");
    assert!(!log.is_empty(), "nothing was committed");
}
