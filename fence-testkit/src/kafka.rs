//! Kafka: the shared Apache Kafka brokers that `scripts/test` starts, brokers a test owns
//! ([`crate::kafka_broker`]: to kill, pause and restart them), or your own cluster
//! (`FENCE_KAFKA_BOOTSTRAP`, `FENCE_KAFKA_PROPERTIES`).

use std::time::Duration;

use fence_core::Observed;
use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use fence_kafka::rdkafka::client::DefaultClientContext;
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::KafkaFence;

use crate::unavailable;

/// A client config for `bootstrap`, plus your security settings from the environment
/// (`FENCE_KAFKA_PROPERTIES`, `FENCE_KAFKA_PROPERTIES_FILE`: see `fence_kafka::env`).
pub fn client_config(bootstrap: &str) -> ClientConfig {
    use fence_core::env::Env;
    let env = Env::from_pairs([(fence_kafka::env::BOOTSTRAP, bootstrap)]).or_else(Env::process());
    fence_kafka::env::client_config(&env).expect("the Kafka settings of the environment")
}

/// Grows `topic` to `total` partitions.
pub async fn add_partitions(config: &ClientConfig, topic: &str, total: usize) {
    use fence_kafka::rdkafka::admin::NewPartitions;
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin client");
    let results = admin
        .create_partitions(&[NewPartitions::new(topic, total)], &AdminOptions::new())
        .await
        .expect("create partitions");
    for result in results {
        result.unwrap_or_else(|(topic, code)| panic!("growing {topic}: {code}"));
    }
}

/// The headers the fence writes on a record of `domain` with token `token` (the domain's only,
/// without a token), for records a test writes outside the fence: a zombie's or a forger's.
pub fn fence_headers(
    domain: &str,
    token: Option<&str>,
) -> fence_kafka::rdkafka::message::OwnedHeaders {
    use fence_kafka::rdkafka::message::{Header, OwnedHeaders};
    let headers = OwnedHeaders::new().insert(Header {
        key: fence_kafka::DOMAIN_HEADER,
        value: Some(domain),
    });
    match token {
        Some(token) => headers.insert(Header {
            key: fence_kafka::TOKEN_HEADER,
            value: Some(token),
        }),
        None => headers,
    }
}

/// The shared broker's bootstrap address, if it listens.
pub fn shared_bootstrap() -> Option<String> {
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into());
    if bootstrap
        .split(',')
        .next()
        .is_some_and(|b| crate::shared_server_answers(b, || crate::listens(b)))
    {
        Some(bootstrap)
    } else {
        unavailable(&format!("the Kafka broker at {bootstrap}")).map(|_| String::new())
    }
}

/// A unique topic name for `name` (topics allow `[a-zA-Z0-9._-]`).
pub fn unique(name: &str) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("fence-test-{name}-{}", crate::unique_suffix())
}

/// Creates `topic` with `partitions` partitions and the broker's default replication (every
/// node of the test clusters); the error says why not.
pub async fn try_create_topic(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| format!("admin client: {e}"))?;
    let results = admin
        .create_topics(
            &[NewTopic::new(
                topic,
                partitions,
                TopicReplication::Fixed(-1),
            )],
            &AdminOptions::new(),
        )
        .await
        .map_err(|e| format!("creating {topic}: {e}"))?;
    for result in results {
        result.map_err(|(topic, code)| format!("creating {topic}: {code}"))?;
    }
    // The brokers' metadata shows a new topic a moment later: wait for it, so a test's first
    // client does not take it for missing (seen under load).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map(|m| {
                m.topics()
                    .iter()
                    .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            })
            .unwrap_or(false);
        if seen {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "{topic} created, but not in the metadata after 20 s"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates a data topic with one partition.
pub async fn create_topic(config: &ClientConfig, topic: &str) {
    try_create_topic(config, topic, 1)
        .await
        .expect("topic created");
}

/// Creates a fresh topic with `partitions` partitions on the shared broker; `None` (loud skip)
/// when the broker is absent.
pub async fn fresh_topic(test: &str, partitions: i32) -> Option<(ClientConfig, String)> {
    let config = client_config(&shared_bootstrap()?);
    let topic = unique(test);
    try_create_topic(&config, &topic, partitions)
        .await
        .expect("topic created");
    Some((config, topic))
}

/// A fence builder on `topic` with the tests' naming (ledger `<topic>-ledger`, transactional
/// ids under `<topic>-`) and a 20 s timeout: each fence built is a separate client, like a
/// separate process, with nothing cached.
pub fn fence_builder(config: &ClientConfig, topic: &str) -> fence_kafka::KafkaFenceBuilder {
    KafkaFence::builder(config.clone())
        .data_topic(topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .timeout(Duration::from_secs(20))
}

/// A fence on `topic`, connected (see [`fence_builder`]).
pub async fn fence_on_topic(config: &ClientConfig, topic: &str) -> Observed<KafkaFence> {
    fence_builder(config, topic)
        .connect()
        .await
        .expect("connect to the broker")
}

/// A fence on fresh topics of `bootstrap`.
pub async fn fence_on(bootstrap: &str, name: &str) -> Observed<KafkaFence> {
    let config = client_config(bootstrap);
    let data = unique(name);
    create_topic(&config, &data).await;
    fence_on_topic(&config, &data).await
}

/// Where the tests of a fault during an append or a read start: a broker of the test's own
/// behind its fault proxy, a fence on it, and a domain with one committed record, `first`,
/// appended under token 1.
pub struct ProxiedFence {
    /// The broker (stopped when dropped).
    pub server: crate::kafka_broker::KafkaServer,
    /// The fault proxy every client of the fence goes through.
    pub proxy: std::sync::Arc<fence_conformance::proxy::TcpProxy>,
    /// The fence.
    pub fence: Observed<KafkaFence>,
    /// The domain holding `first`.
    pub domain: fence_core::Domain,
}

impl ProxiedFence {
    /// Starts it all for the test `name`; `None` (loud skip, a failure under `scripts/test`)
    /// without the Kafka classpath.
    pub async fn start(name: &str) -> Option<Self> {
        use crate::kafka_broker::{BrokerOptions, KafkaServer};
        use fence_core::{AppendRequest, Domain, FencedLog, FencingToken, Record};
        let server = KafkaServer::start_with(name, BrokerOptions::new().behind_proxy())?;
        let proxy = server.proxy().expect("the broker's proxy");
        let fence = fence_on(&server.bootstrap(), name).await;
        let domain = Domain::new(name).expect("a test's name is a domain");
        let token = FencingToken::new(1).expect("1 is a token");
        fence
            .append(&AppendRequest::new(
                domain.clone(),
                token,
                vec![Record::new("first")],
            ))
            .await
            .expect("the first append");
        Some(ProxiedFence {
            server,
            proxy,
            fence,
            domain,
        })
    }
}

/// A fence on fresh topics of the shared broker; `None` (loud skip) when it is absent.
pub async fn shared_fence(name: &str) -> Option<Observed<KafkaFence>> {
    let bootstrap = shared_bootstrap()?;
    Some(fence_on(&bootstrap, name).await)
}

/// Dedicated brokers are used under the project's test command (scripts/test sets
/// FENCE_KAFKA_LIB, the broker's classpath); with only FENCE_KAFKA_BOOTSTRAP set, the suite
/// runs on that cluster.
pub fn external_cluster() -> Option<String> {
    if std::env::var_os("FENCE_KAFKA_LIB").is_none() {
        std::env::var("FENCE_KAFKA_BOOTSTRAP").ok()
    } else {
        None
    }
}

/// A fence on librdkafka's mock cluster `mock` (which injects error codes but does no real
/// fencing), built by `customize` from [`mock_fence_builder`], that has made its first change
/// (a claim of domain `setup`), so the ledger's layout record is written before the test injects
/// any error.
pub async fn mock_fence(
    mock: &fence_kafka::rdkafka::mocking::MockCluster<
        '_,
        fence_kafka::rdkafka::producer::DefaultProducerContext,
    >,
    customize: impl FnOnce(fence_kafka::KafkaFenceBuilder) -> fence_kafka::KafkaFenceBuilder,
) -> Observed<KafkaFence> {
    use fence_core::Fence;
    let fence = customize(mock_fence_builder(mock))
        .build()
        .expect("a mock fence");
    let setup = fence_core::Domain::new("setup").expect("a domain");
    fence
        .claim(&setup, fence_core::FencingToken::MIN)
        .await
        .expect("the first claim on the mock cluster");
    fence
}

/// A fence builder on librdkafka's mock cluster `mock` (which injects error codes but does no
/// real fencing), with its topics `events` (data) and `fence-ledger` created.
pub fn mock_fence_builder(
    mock: &fence_kafka::rdkafka::mocking::MockCluster<
        '_,
        fence_kafka::rdkafka::producer::DefaultProducerContext,
    >,
) -> fence_kafka::KafkaFenceBuilder {
    mock.create_topic("events", 1, 1).expect("mock topic");
    mock.create_topic("fence-ledger", 1, 1).expect("mock topic");
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", mock.bootstrap_servers());
    KafkaFence::builder(config).data_topic("events")
}
