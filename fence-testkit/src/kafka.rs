//! Kafka: the shared broker that `scripts/test` starts, dedicated noida-db brokers a test
//! owns (to restart them), or your own cluster (`FENCE_KAFKA_BOOTSTRAP`, `FENCE_KAFKA_PROPERTIES`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use fence_kafka::rdkafka::client::DefaultClientContext;
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::KafkaFence;

use crate::process::ManagedProcess;

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

/// The shared broker's bootstrap address, if it listens.
pub fn shared_bootstrap() -> Option<String> {
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into());
    if bootstrap.split(',').next().is_some_and(crate::listens) {
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

/// Creates `topic` with `partitions` partitions (replication 1); the error says why not.
pub async fn try_create_topic(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| format!("admin client: {e}"))?;
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .map_err(|e| format!("creating {topic}: {e}"))?;
    for result in results {
        result.map_err(|(topic, code)| format!("creating {topic}: {code}"))?;
    }
    Ok(())
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

/// A fence on `topic` (each call is a separate client, like a separate process).
pub async fn fence_on_topic(config: &ClientConfig, topic: &str) -> KafkaFence {
    KafkaFence::builder(config.clone())
        .data_topic(topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect("connect to the broker")
}

/// A fence on fresh topics of `bootstrap`.
pub async fn fence_on(bootstrap: &str, name: &str) -> KafkaFence {
    let config = client_config(bootstrap);
    let data = unique(name);
    create_topic(&config, &data).await;
    KafkaFence::builder(config)
        .data_topic(&data)
        .ledger_topic(format!("{data}-ledger"))
        .transactional_id_prefix(format!("{data}-"))
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .expect("connect to the broker")
}

/// A fence on fresh topics of the shared broker; `None` (loud skip) when it is absent.
pub async fn shared_fence(name: &str) -> Option<KafkaFence> {
    let bootstrap = shared_bootstrap()?;
    Some(fence_on(&bootstrap, name).await)
}

fn noida_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("FENCE_NOIDA_BIN") {
        return Some(PathBuf::from(path));
    }
    let venv = crate::services_dir().join("noida-venv/lib");
    std::fs::read_dir(venv)
        .ok()?
        .flatten()
        .map(|e| e.path().join("site-packages/noida_db/noida-db"))
        .find(|p| p.exists())
}

/// Dedicated brokers are used when a noida-db binary is given (scripts/test sets
/// FENCE_NOIDA_BIN); with only FENCE_KAFKA_BOOTSTRAP set, the suite runs on that cluster.
pub fn external_cluster() -> Option<String> {
    if std::env::var_os("FENCE_NOIDA_BIN").is_none() {
        std::env::var("FENCE_KAFKA_BOOTSTRAP").ok()
    } else {
        None
    }
}

/// A noida-db broker owned by the test, stopped when dropped.
pub struct NoidaServer {
    binary: PathBuf,
    port: u16,
    process: ManagedProcess,
}

impl NoidaServer {
    /// Starts a broker named `name` on a free port; `None` (loud skip) without a noida-db binary.
    ///
    /// A free port, confirmed once the broker listens: if another process took it in between,
    /// our broker exits (or never owns the socket) and another port is tried.
    pub fn start(name: &str) -> Option<Self> {
        let Some(binary) = noida_binary() else {
            unavailable("the noida-db binary (set FENCE_NOIDA_BIN or run scripts/test)")?;
            return None;
        };
        Some(ManagedProcess::start(
            "noida-db",
            "noida-tests",
            name,
            |process| {
                let server = NoidaServer {
                    binary: binary.clone(),
                    port: crate::free_port(),
                    process,
                };
                server.spawn().then_some(server)
            },
        ))
    }

    /// Starts the broker on its port; false if the port turned out to be another process's.
    fn spawn(&self) -> bool {
        let dir = self.process.dir();
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(dir.join("noida.log"))
            .expect("log");
        let mut command = Command::new(&self.binary);
        command
            .args([
                "start",
                "--only",
                "kafka",
                "--host",
                "127.0.0.1",
                "--kafka-port",
                &self.port.to_string(),
                "--data-dir",
            ])
            .arg(dir.join("data"))
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log));
        let bootstrap = self.bootstrap();
        self.process
            .spawn_and_wait(&mut command, self.port, Duration::from_secs(20), || {
                crate::listens(&bootstrap)
            })
    }

    /// The broker's bootstrap address.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Waits until the broker's snapshot (`data/kafka.json`) has settled: at least 2 s since this
    /// call and since the file last changed, so a snapshot written late on a loaded machine is
    /// waited for too (up to 20 s).
    fn wait_for_snapshot(&self) {
        let snapshot = self.process.dir().join("data").join("kafka.json");
        let called = std::time::SystemTime::now();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let changed = std::fs::metadata(&snapshot)
                .and_then(|m| m.modified())
                .unwrap_or(called)
                .max(called);
            if changed
                .elapsed()
                .is_ok_and(|quiet| quiet >= Duration::from_secs(2))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "noida-db's snapshot never settled"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGSTOP or SIGCONT the broker, to make requests hang.
    pub fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// Waits out the broker's snapshot delay (noida-db writes its data to disk ~1.2 s after a
    /// write; a crash sooner loses it, which is its documented limit, not Fence's), then kills it
    /// with SIGKILL, a crash, and starts it again on the same port and data.
    pub fn restart(&self) {
        self.wait_for_snapshot();
        self.process.kill();
        assert!(
            self.spawn(),
            "another process took port {} while noida-db was down",
            self.port
        );
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
) -> KafkaFence {
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
