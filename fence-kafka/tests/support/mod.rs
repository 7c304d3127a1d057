//! Test support: the shared broker that `scripts/test` starts, dedicated noida-db brokers a test
//! owns (to restart them), or your own cluster (`FENCE_KAFKA_BOOTSTRAP`, `FENCE_KAFKA_PROPERTIES`).
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use fence_kafka::rdkafka::client::DefaultClientContext;
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::KafkaFence;

pub use fence_conformance::services::unavailable;

/// A client config for `bootstrap`, plus `FENCE_KAFKA_PROPERTIES` (`key=value;key=value`: your
/// security settings).
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    if let Ok(properties) = std::env::var("FENCE_KAFKA_PROPERTIES") {
        for pair in properties.split(';').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .expect("FENCE_KAFKA_PROPERTIES holds key=value pairs");
            config.set(key.trim(), value.trim());
        }
    }
    config
}

fn listens(address: &str) -> bool {
    address
        .parse()
        .ok()
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
}

/// The shared broker's bootstrap address, if it listens.
pub fn shared_bootstrap() -> Option<String> {
    let bootstrap =
        std::env::var("FENCE_KAFKA_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:19092".into());
    if bootstrap.split(',').next().is_some_and(listens) {
        Some(bootstrap)
    } else {
        unavailable(&format!("the Kafka broker at {bootstrap}")).map(|_| String::new())
    }
}

pub fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "fence-test-{name}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates a data topic with one partition.
pub async fn create_topic(config: &ClientConfig, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = config.create().expect("admin client");
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .expect("create topic");
    for result in results {
        result.expect("topic created");
    }
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

pub async fn shared_fence(name: &str) -> Option<KafkaFence> {
    let bootstrap = shared_bootstrap()?;
    Some(fence_on(&bootstrap, name).await)
}

fn noida_binary() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("FENCE_NOIDA_BIN") {
        return Some(PathBuf::from(path));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.services/noida-venv/lib");
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
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

impl NoidaServer {
    pub fn start(name: &str) -> Option<Self> {
        let Some(binary) = noida_binary() else {
            unavailable("the noida-db binary (set FENCE_NOIDA_BIN or run scripts/test)")?;
            return None;
        };
        static N: AtomicU64 = AtomicU64::new(0);
        let root = std::env::var("FENCE_SERVICES_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.services"));
        let dir = root.join("noida-tests").join(format!(
            "{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        // A free port, confirmed once the broker listens: if another process took it in
        // between, our broker exits (or never owns the socket) and another port is tried.
        for _ in 0..5 {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("test data dir");
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port");
            let server = NoidaServer {
                binary: binary.clone(),
                port,
                dir: dir.clone(),
                child: Mutex::new(None),
            };
            if server.spawn() {
                return Some(server);
            }
        }
        panic!("noida-db could not get a port of its own in 5 tries");
    }

    /// Starts the broker on its port; false if the port turned out to be another process's.
    fn spawn(&self) -> bool {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("noida.log"))
            .expect("log");
        let child = Command::new(&self.binary)
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
            .arg(self.dir.join("data"))
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("noida-db starts");
        *self.child.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut foreign_since: Option<Instant> = None;
        loop {
            let answering = listens(&self.bootstrap());
            if let Some(ours) = fence_conformance::services::port_claim(
                &self.child,
                self.port,
                answering,
                &mut foreign_since,
            ) {
                return ours;
            }
            assert!(
                Instant::now() < deadline,
                "noida-db did not listen on {}",
                self.bootstrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until the broker's snapshot (`data/kafka.json`) has settled: at least 2 s since this
    /// call and since the file last changed, so a snapshot written late on a loaded machine is
    /// waited for too (up to 20 s).
    fn wait_for_snapshot(&self) {
        let snapshot = self.dir.join("data").join("kafka.json");
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
        let pid = self
            .child
            .lock()
            .unwrap()
            .as_ref()
            .map(Child::id)
            .expect("running");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal}");
    }

    /// Waits out the broker's snapshot delay (noida-db writes its data to disk ~1.2 s after a
    /// write; a crash sooner loses it, which is its documented limit, not Fence's), then kills it
    /// with SIGKILL, a crash, and starts it again on the same port and data.
    pub fn restart(&self) {
        self.wait_for_snapshot();
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(
            self.spawn(),
            "another process took port {} while noida-db was down",
            self.port
        );
    }
}

impl Drop for NoidaServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
