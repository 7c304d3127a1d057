//! Apache Kafka brokers a test owns: one KRaft node ([`KafkaServer`]) or a three-node cluster
//! ([`KafkaCluster`]), to kill -9, pause and restart on their data. Each node is started with
//! `scripts/kafka/broker`, the one place a test broker's configuration is written (the shared
//! brokers of `scripts/test` use it too), on the classpath `scripts/kafka/fetch` fetched from
//! Maven Central.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_conformance::proxy::TcpProxy;

use crate::process::{ManagedProcess, Readiness};

/// How long a node may take to format its storage and open its client port on a loaded
/// two-core machine (a warm start takes 3–6 s).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The Apache Kafka classpath: `FENCE_KAFKA_LIB`, or the folder `scripts/kafka/fetch` fills
/// under the services folder; `None` when it was never fetched.
pub fn classpath() -> Option<PathBuf> {
    if let Some(lib) = std::env::var_os("FENCE_KAFKA_LIB") {
        return Some(PathBuf::from(lib));
    }
    let output = Command::new(scripts().join("fetch"))
        .arg("--print")
        .env("FENCE_SERVICES_DIR", crate::services_dir())
        .output()
        .ok()?;
    let lib = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    lib.join(".complete").exists().then_some(lib)
}

fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka")
}

/// The transaction protocol the brokers a test owns are formatted with:
/// `FENCE_KAFKA_TRANSACTION_VERSION` (1, or 2 = KIP-890's transactions v2, the default), so
/// `scripts/test` runs the Kafka suites once under each.
pub fn transaction_version() -> u8 {
    match std::env::var("FENCE_KAFKA_TRANSACTION_VERSION").as_deref() {
        Ok("1") => 1,
        Ok("2") | Err(_) => 2,
        Ok(other) => panic!("FENCE_KAFKA_TRANSACTION_VERSION is 1 or 2, not {other:?}"),
    }
}

/// How a test's broker is set up beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct BrokerOptions {
    transaction_version: Option<u8>,
    properties: Option<String>,
    proxied: bool,
    oauthbearer: bool,
}

impl BrokerOptions {
    /// The defaults: [`transaction_version`], plaintext, clients dial the broker itself.
    pub fn new() -> Self {
        Self::default()
    }

    /// Formats with `transaction.version=version` instead of [`transaction_version`].
    pub fn transaction_version(mut self, version: u8) -> Self {
        self.transaction_version = Some(version);
        self
    }

    /// Server properties appended to the generated ones (later keys win): SASL, ACLs.
    pub fn properties(mut self, properties: impl Into<String>) -> Self {
        self.properties = Some(properties.into());
        self
    }

    /// Makes the client port speak SASL_PLAINTEXT with OAUTHBEARER (unsecured JWS tokens, see
    /// [`unsecured_token`]) and lets Kafka's StandardAuthorizer decide every request; the
    /// internal port ([`KafkaServer::internal_bootstrap`]) stays plaintext for the test's own
    /// set-up, as the super user.
    pub fn sasl_oauthbearer(mut self) -> Self {
        self.oauthbearer = true;
        self
    }

    /// Puts a fault proxy ([`TcpProxy`]) in front of each node's client port and makes the
    /// node advertise it, so every client connection, including the ones metadata leads to,
    /// crosses the proxy; brokers reach each other on an internal port past it.
    pub fn behind_proxy(mut self) -> Self {
        self.proxied = true;
        self
    }
}

/// One node's ports.
#[derive(Debug, Clone, Copy)]
struct Ports {
    client: u16,
    controller: u16,
    internal: u16,
}

impl Ports {
    fn fresh() -> Self {
        Ports {
            client: crate::free_port(),
            controller: crate::free_port(),
            internal: crate::free_port(),
        }
    }
}

/// One broker+controller process.
#[derive(Debug)]
struct Node {
    id: u32,
    ports: Ports,
    proxy: Option<Arc<TcpProxy>>,
    process: ManagedProcess,
}

impl Node {
    /// The address clients are told to dial (the proxy's, when there is one).
    fn advertised(&self) -> String {
        let port = self.proxy.as_ref().map_or(self.ports.client, |p| p.port());
        format!("127.0.0.1:{port}")
    }

    fn spawn(&self, voters: &str, cluster_id: &str, options: &BrokerOptions) -> Readiness {
        let dir = self.process.dir();
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(dir.join("stdout.log"))
            .expect("broker log");
        let version = options
            .transaction_version
            .unwrap_or_else(transaction_version);
        let mut command = Command::new(scripts().join("broker"));
        command
            .arg("--dir")
            .arg(dir)
            .args(["--node", &self.id.to_string()])
            .args(["--port", &self.ports.client.to_string()])
            .args(["--controller-port", &self.ports.controller.to_string()])
            .args(["--voters", voters])
            .args(["--cluster-id", cluster_id])
            .args(["--transaction-version", &version.to_string()])
            .env("FENCE_SERVICES_DIR", crate::services_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("broker log")))
            .stderr(Stdio::from(log));
        command.args(["--internal-port", &self.ports.internal.to_string()]);
        if self.proxy.is_some() {
            command.args(["--advertise", &self.advertised()]);
        }
        if options.oauthbearer {
            command.arg("--sasl-oauthbearer");
        }
        if let Some(properties) = &options.properties {
            let file = dir.join("extra.properties");
            std::fs::write(&file, properties).expect("extra properties");
            command.arg("--properties").arg(file);
        }
        if let Some(lib) = classpath() {
            command.env("FENCE_KAFKA_LIB", lib);
        }
        self.process
            .spawn(&mut command, self.ports.client, START_TIMEOUT)
    }

    /// Polls until the node answers on its client port as its owner; false when the port is
    /// another process's.
    fn wait(&self, readiness: &mut Readiness) -> bool {
        let address = format!("127.0.0.1:{}", self.ports.client);
        loop {
            if let Some(ours) = self.process.ready(readiness, crate::listens(&address)) {
                if !ours {
                    let log = std::fs::read_to_string(self.process.dir().join("stdout.log"));
                    let log = log.unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(5).collect();
                    eprintln!(
                        "kafka node {} left port {}: {tail:?}",
                        self.id, self.ports.client
                    );
                }
                return ours;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn server_log(&self) -> PathBuf {
        self.process.dir().join("server.log")
    }
}

/// The `transaction.version` the node's controller finalized, read from its log (`None` until
/// it has logged its finalized features).
fn finalized_transaction_version(log: &Path) -> Option<u8> {
    let text = std::fs::read_to_string(log).ok()?;
    let features = text.lines().rev().find_map(|line| {
        let start = line.find("finalizedFeatures={")? + "finalizedFeatures={".len();
        let rest = line.get(start..)?;
        Some(rest.get(..rest.find('}')?)?.to_owned())
    })?;
    features
        .split(", ")
        .find_map(|pair| pair.strip_prefix("transaction.version="))
        .and_then(|v| v.parse().ok())
}

/// Starts `count` nodes that form one KRaft quorum (fresh ports and data dirs, up to five
/// tries when a port turns out to be another process's); `None` without a Kafka classpath.
fn start_nodes(name: &str, count: u32, options: &BrokerOptions) -> Option<Vec<Node>> {
    if classpath().is_none() {
        crate::unavailable(
            "Apache Kafka's classpath (run scripts/kafka/fetch, or scripts/test, which does)",
        )?;
        return None;
    }
    for _ in 0..5 {
        let nodes: Vec<Node> = (1..=count)
            .map(|id| {
                let ports = Ports::fresh();
                let proxy = options.proxied.then(|| start_proxy(ports.client));
                let process = ManagedProcess::start(
                    "kafka",
                    "kafka-tests",
                    &format!("{name}-node{id}"),
                    Some,
                );
                Node {
                    id,
                    ports,
                    proxy,
                    process,
                }
            })
            .collect();
        let voters = voters(&nodes);
        let cluster_id = cluster_id();
        let mut waits: Vec<Readiness> = nodes
            .iter()
            .map(|node| node.spawn(&voters, &cluster_id, options))
            .collect();
        let all_ours = nodes
            .iter()
            .zip(waits.iter_mut())
            .all(|(node, readiness)| node.wait(readiness));
        if all_ours {
            return Some(nodes);
        }
    }
    panic!("kafka could not get ports of its own in 5 tries");
}

/// A fault proxy in front of `port`, on a runtime of the test kit's own: brokers are started
/// from sync code and from async tests alike, and a test's runtime must not be blocked on.
fn start_proxy(port: u16) -> Arc<TcpProxy> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the fault proxies")
    });
    let upstream = format!("127.0.0.1:{port}").parse().expect("address");
    let proxy = std::thread::scope(|scope| {
        scope
            .spawn(|| runtime.block_on(TcpProxy::start(upstream)))
            .join()
    })
    .expect("the proxy thread")
    .expect("a fault proxy");
    Arc::new(proxy)
}

fn voters(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("{}@127.0.0.1:{}", n.id, n.ports.controller))
        .collect::<Vec<_>>()
        .join(",")
}

/// A KRaft cluster id: 16 random bytes, base64url without padding (as StorageTool's own).
fn cluster_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut bytes = [0u8; 16];
    for chunk in bytes.chunks_mut(8) {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write(crate::unique_suffix().as_bytes());
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    base64url(&bytes)
}

/// `bytes` in base64url without padding (RFC 4648 §5).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits = 0u32;
    let mut held = 0;
    let mut out = String::new();
    for &byte in bytes {
        bits = (bits << 8) | u32::from(byte);
        held += 8;
        while held >= 6 {
            held -= 6;
            out.push(char::from(ALPHABET[((bits >> held) & 63) as usize]));
        }
    }
    if held > 0 {
        out.push(char::from(ALPHABET[((bits << (6 - held)) & 63) as usize]));
    }
    out
}

/// An unsecured JWS (`"alg":"none"`, no signature) naming `principal` as its subject, valid
/// for ten minutes: what Kafka's unsecured OAUTHBEARER validator, meant for tests, accepts
/// from a broker started with [`BrokerOptions::sasl_oauthbearer`]. Returns the token and its
/// expiry in milliseconds since the Unix epoch.
pub fn unsecured_token(principal: &str) -> (String, i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let expires = now + 600;
    let header = base64url(br#"{"alg":"none"}"#);
    let claims =
        base64url(format!(r#"{{"sub":"{principal}","iat":{now},"exp":{expires}}}"#).as_bytes());
    let expires_ms = i64::try_from(expires * 1000).expect("a plausible clock");
    (format!("{header}.{claims}."), expires_ms)
}

/// Kills `node` with SIGKILL, a crash, and starts it again on the same ports and data.
fn restart_node(node: &Node, voters: &str, options: &BrokerOptions) {
    node.process.kill();
    let mut readiness = node.spawn(voters, "unused-after-format", options);
    assert!(
        node.wait(&mut readiness),
        "another process took port {} while the broker was down",
        node.ports.client
    );
}

/// An Apache Kafka broker of the test's own (one KRaft node, broker and controller in one
/// process), stopped and its data removed when dropped.
#[derive(Debug)]
pub struct KafkaServer {
    node: Node,
    options: BrokerOptions,
}

impl KafkaServer {
    /// Starts a broker named `name` with the default [`BrokerOptions`]; `None` (loud skip, a
    /// failure under `scripts/test`) without the Kafka classpath.
    pub fn start(name: &str) -> Option<Self> {
        Self::start_with(name, BrokerOptions::new())
    }

    /// Starts a broker named `name` set up by `options`.
    pub fn start_with(name: &str, options: BrokerOptions) -> Option<Self> {
        let mut nodes = start_nodes(name, 1, &options)?;
        let node = nodes.pop().expect("one node");
        Some(KafkaServer { node, options })
    }

    /// The bootstrap address clients use (the proxy's, when behind one).
    pub fn bootstrap(&self) -> String {
        self.node.advertised()
    }

    /// The fault proxy in front of the broker, when started [`BrokerOptions::behind_proxy`].
    pub fn proxy(&self) -> Option<Arc<TcpProxy>> {
        self.node.proxy.clone()
    }

    /// The broker's internal listener: plaintext, past any proxy, and the super user when the
    /// client port takes OAUTHBEARER (for the test's own topics and ACLs).
    pub fn internal_bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.node.ports.internal)
    }

    /// Adds ACLs with Kafka's own ACL command on the internal listener:
    /// `args` as `kafka-acls.sh --add` takes them (`--allow-principal User:w --operation Write
    /// --topic t`, …).
    pub fn add_acls(&self, args: &[&str]) {
        let lib = classpath().expect("the Kafka classpath");
        let output = Command::new("java")
            .arg("-cp")
            .arg(format!("{}/*", lib.display()))
            .arg("org.apache.kafka.tools.AclCommand")
            .args(["--bootstrap-server", &self.internal_bootstrap(), "--add"])
            .args(args)
            .output()
            .expect("java runs the ACL command");
        assert!(
            output.status.success(),
            "kafka-acls --add {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// SIGSTOP or SIGCONT the broker, to make requests hang.
    pub fn signal(&self, signal: &str) {
        self.node.process.signal(signal);
    }

    /// Kills the broker with SIGKILL, a crash, and starts it again on the same port and data.
    pub fn restart(&self) {
        restart_node(
            &self.node,
            &voters(std::slice::from_ref(&self.node)),
            &self.options,
        );
    }

    /// The `transaction.version` the broker finalized (read from its log).
    pub fn transaction_version(&self) -> u8 {
        wait_for_features(&self.node.server_log())
    }
}

/// Waits (up to 30 s) until the node has logged its finalized features.
fn wait_for_features(log: &Path) -> u8 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(version) = finalized_transaction_version(log) {
            return version;
        }
        assert!(
            Instant::now() < deadline,
            "no finalized features in {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three Apache Kafka nodes of the test's own forming one KRaft cluster (each a broker and a
/// controller; internal topics and the broker's default replication 3, `min.insync.replicas`
/// 2), stopped and their data removed when dropped.
#[derive(Debug)]
pub struct KafkaCluster {
    nodes: Vec<Node>,
    options: BrokerOptions,
}

impl KafkaCluster {
    /// Starts a three-node cluster named `name`; `None` (loud skip) without the classpath.
    pub fn start(name: &str) -> Option<Self> {
        Self::start_with(name, BrokerOptions::new())
    }

    /// Starts a three-node cluster named `name` set up by `options`.
    pub fn start_with(name: &str, options: BrokerOptions) -> Option<Self> {
        let nodes = start_nodes(name, 3, &options)?;
        Some(KafkaCluster { nodes, options })
    }

    /// Every node's client address, comma-separated (proxies', when behind them).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(Node::advertised)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node ids, 1 to 3.
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    fn node(&self, id: u32) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The fault proxy in front of node `id`, when started [`BrokerOptions::behind_proxy`].
    pub fn proxy(&self, id: u32) -> Option<Arc<TcpProxy>> {
        self.node(id).proxy.clone()
    }

    /// Kills node `id` with SIGKILL (it stays down until [`KafkaCluster::start_node`]).
    pub fn kill(&self, id: u32) {
        self.node(id).process.kill();
    }

    /// Starts node `id` again on its ports and data (after [`KafkaCluster::kill`]).
    pub fn start_node(&self, id: u32) {
        let node = self.node(id);
        let mut readiness = node.spawn(&voters(&self.nodes), "unused-after-format", &self.options);
        assert!(
            node.wait(&mut readiness),
            "another process took port {} while node {id} was down",
            node.ports.client
        );
    }

    /// Kills node `id` with SIGKILL and starts it again on its data.
    pub fn restart(&self, id: u32) {
        restart_node(self.node(id), &voters(&self.nodes), &self.options);
    }

    /// Kills every node with SIGKILL, then starts them all again on their data: a whole-cluster
    /// crash.
    pub fn restart_all(&self) {
        for node in &self.nodes {
            node.process.kill();
        }
        let voters = voters(&self.nodes);
        let mut waits: Vec<Readiness> = self
            .nodes
            .iter()
            .map(|node| node.spawn(&voters, "unused-after-format", &self.options))
            .collect();
        for (node, readiness) in self.nodes.iter().zip(waits.iter_mut()) {
            assert!(
                node.wait(readiness),
                "another process took port {} while the cluster was down",
                node.ports.client
            );
        }
    }

    /// SIGSTOP or SIGCONT node `id`.
    pub fn signal(&self, id: u32, signal: &str) {
        self.node(id).process.signal(signal);
    }

    /// A server property as `scripts/kafka/broker` wrote it for node 1 (every node has the
    /// same but for its ports), e.g. `transaction.state.log.num.partitions`.
    pub fn property(&self, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.node(1).process.dir().join("server.properties"))
            .expect("the node's server.properties");
        text.lines()
            .rev()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
    }

    /// The `transaction.version` the cluster finalized (read from node 1's log).
    pub fn transaction_version(&self) -> u8 {
        wait_for_features(&self.node(1).server_log())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_rfc_4648_without_padding() {
        assert_eq!(base64url(b""), "");
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url(br#"{"alg":"none"}"#), "eyJhbGciOiJub25lIn0");
    }

    #[test]
    fn cluster_ids_are_22_base64url_characters_and_differ() {
        let (a, b) = (cluster_id(), cluster_id());
        assert_eq!(a.len(), 22, "{a}");
        assert!(a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(a, b);
    }

    #[test]
    fn the_finalized_transaction_version_is_read_from_the_last_features_line() {
        let dir = crate::data_root("kafka-log-test").join(crate::unique_suffix());
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("server.log");
        assert_eq!(finalized_transaction_version(&log), None);
        std::fs::write(
            &log,
            "x finalizedFeatures={group.version=1, transaction.version=0, metadata.version=33}, e\n\
             y finalizedFeatures={group.version=1, transaction.version=2, share.version=2}, e\n",
        )
        .unwrap();
        assert_eq!(finalized_transaction_version(&log), Some(2));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
