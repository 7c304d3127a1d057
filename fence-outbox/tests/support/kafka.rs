//! The shared Kafka broker (noida-db under scripts/test) and fresh topics per test.

use std::net::TcpStream;
use std::time::Duration;

use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use fence_kafka::rdkafka::client::DefaultClientContext;
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::KafkaFence;

use super::{unavailable, unique_prefix};

fn bootstrap() -> Option<String> {
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into());
    let listening = bootstrap
        .split(',')
        .next()
        .and_then(|a| a.parse().ok())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok());
    if !listening {
        unavailable(&format!("the Kafka broker at {bootstrap}"))?;
    }
    Some(bootstrap)
}

/// Fresh data topic names (with `partitions` partitions) on the shared broker.
pub async fn fresh_topics(test: &str, partitions: i32) -> Option<(ClientConfig, String)> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap()?);
    let topic: String = unique_prefix(test)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin client");
    for result in admin
        .create_topics(
            &[NewTopic::new(
                &topic,
                partitions,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new(),
        )
        .await
        .expect("create topic")
    {
        result.expect("topic created");
    }
    Some((config, topic))
}

/// A fence on `topic` (each call is a separate client, like a separate process).
pub async fn fence(config: &ClientConfig, topic: &str) -> KafkaFence {
    KafkaFence::builder(config.clone())
        .data_topic(topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect("connect to the broker")
}
