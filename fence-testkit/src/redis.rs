//! Redis: dedicated redis-server processes a test owns (so it can kill, pause and restart
//! them), and the shared servers that `scripts/test` starts.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fence_core::Observed;
use fence_redis::RedisFence;

use crate::process::ManagedProcess;
use crate::{free_port, unavailable};

fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

fn port_of(url: &str) -> Option<u16> {
    url.rsplit(':').next()?.trim_end_matches('/').parse().ok()
}

/// The shared standalone server's URL, if it answers.
pub fn shared_url() -> Option<String> {
    let url = std::env::var("FENCE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    if port_of(&url).is_some_and(|port| crate::shared_server_answers(&url, || answers(port))) {
        Some(url)
    } else {
        unavailable(&format!("the shared Redis at {url}")).map(|_| String::new())
    }
}

/// The shared cluster's seed URLs, if they answer.
pub fn shared_cluster() -> Option<Vec<String>> {
    let nodes = std::env::var("FENCE_REDIS_CLUSTER").unwrap_or_else(|_| {
        "redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103".into()
    });
    let nodes: Vec<String> = nodes.split(',').map(String::from).collect();
    if nodes
        .iter()
        .all(|n| port_of(n).is_some_and(|port| crate::shared_server_answers(n, || answers(port))))
    {
        Some(nodes)
    } else {
        unavailable(&format!("the shared Redis Cluster at {nodes:?}")).map(|_| Vec::new())
    }
}

/// A unique key prefix per test run (short enough for every fence's 64-byte limit).
pub fn unique_prefix(test: &str) -> String {
    format!("ft:{test}:{}", crate::unique_suffix())
}

fn have_redis_server() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// An extra argument of [`RedisServer::start`] replaced by a port chosen free on each try.
pub const FREE_PORT: &str = "{free port}";

/// One redis-server process owned by the test, on its own port and data dir (AOF on,
/// `appendfsync always`), killed when dropped.
pub struct RedisServer {
    /// The port it listens on.
    pub port: u16,
    extra: Vec<String>,
    process: ManagedProcess,
}

impl RedisServer {
    /// Starts a dedicated server, or skips/fails if redis-server is not installed.
    ///
    /// The port is chosen free, then confirmed: the socket listening on it must be our child's,
    /// and if another process took the port in between, our child exits and another port is
    /// tried. No test ever talks to a server it did not start.
    pub fn start(name: &str, extra: &[&str]) -> Option<Self> {
        if !have_redis_server() {
            unavailable("the redis-server binary")?;
        }
        Some(ManagedProcess::start(
            "redis-server",
            "redis-tests",
            name,
            |process| {
                let server = RedisServer {
                    port: free_port(),
                    // Every extra port is chosen anew per try too (a taken one fails the try).
                    extra: extra
                        .iter()
                        .map(|s| match *s {
                            FREE_PORT => free_port().to_string(),
                            other => other.to_owned(),
                        })
                        .collect(),
                    process,
                };
                server.spawn().then_some(server)
            },
        ))
    }

    /// Starts the server on its port; false if the port turned out to be taken.
    fn spawn(&self) -> bool {
        let dir = self.process.dir();
        let mut command = Command::new("redis-server");
        command
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .args(&self.extra)
            .stdout(Stdio::null());
        let port = self.port;
        self.process
            .spawn_and_wait(&mut command, port, Duration::from_secs(10), || {
                answers(port)
            })
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// SIGKILL (no shutdown, no final fsync) and start again on the same port and data dir.
    pub fn kill_and_restart(&self) {
        self.process.kill();
        assert!(
            self.spawn(),
            "another process took port {} while redis-server was down",
            self.port
        );
    }

    /// SIGSTOP or SIGCONT the server, to make requests hang.
    pub fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }

    /// Whether `replica` replicates this server and this server counts it for `WAIT`: the
    /// replica reports its link up, and this server has had the replica's first
    /// acknowledgement after the sync (`state=online`), which can come a second later.
    pub fn replicated_by(&self, replica: &RedisServer) -> bool {
        replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
            && self
                .cli(&["INFO", "replication"])
                .contains(&format!("port={},state=online", replica.port))
    }

    /// Runs `redis-cli` against it and returns the output.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args)
    }
}

/// Runs `redis-cli` against the server on `port` and returns its output.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A dedicated 3-master Redis Cluster owned by the test.
pub struct RedisCluster {
    /// The masters, in slot order.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three masters and joins them into a cluster; `None` (loud skip) without redis-server.
    pub fn start(name: &str) -> Option<Self> {
        let mut nodes = Vec::new();
        for i in 0..3 {
            let node = RedisServer::start(
                &format!("{name}-node{i}"),
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    FREE_PORT,
                    "--cluster-node-timeout",
                    "3000",
                ],
            )?;
            nodes.push(node);
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        Some(cluster)
    }

    fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .nodes
            .iter()
            .all(|n| n.cli(&["cluster", "info"]).contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "cluster did not reach cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The masters' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// SIGKILL every node, start them again from their data dirs, wait for the cluster.
    pub fn kill_and_restart(&self) {
        for node in &self.nodes {
            node.process.kill();
        }
        for node in &self.nodes {
            assert!(
                node.spawn(),
                "another process took port {} while the cluster was down",
                node.port
            );
        }
        self.wait_ok();
    }
}

/// A fence on the shared standalone server with a unique prefix.
pub async fn shared_fence(test: &str) -> Option<Observed<RedisFence>> {
    let url = shared_url()?;
    Some(
        RedisFence::builder()
            .url(url)
            .prefix(unique_prefix(test))
            .connect()
            .await
            .expect("connect to the shared Redis"),
    )
}

/// A fence on the shared cluster with a unique prefix.
pub async fn shared_cluster_fence(test: &str) -> Option<Observed<RedisFence>> {
    let nodes = shared_cluster()?;
    Some(
        RedisFence::builder()
            .cluster(nodes)
            .prefix(unique_prefix(test))
            .connect()
            .await
            .expect("connect to the shared cluster"),
    )
}

/// A plain connection for the test's own checks, as patient as the fence (redis-rs defaults to
/// 500 ms, which one `appendfsync always` fsync on a busy disk can exceed).
pub async fn raw(url: &str) -> fence_redis::redis::aio::MultiplexedConnection {
    let config = fence_redis::redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_secs(10)));
    fence_redis::redis::Client::open(url)
        .expect("a valid URL")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a test connection")
}

/// A plain connection to the shared standalone server or the shared cluster (which routes each
/// command by its key), for a test's own checks on either.
pub enum RawRedis {
    /// The standalone server.
    Standalone(fence_redis::redis::aio::MultiplexedConnection),
    /// The cluster.
    Cluster(fence_redis::redis::cluster_async::ClusterConnection),
}

impl RawRedis {
    /// A connection to the shared cluster (`cluster`) or standalone server.
    pub async fn shared(cluster: bool) -> Self {
        if !cluster {
            return RawRedis::Standalone(raw(&shared_url().expect("the shared Redis")).await);
        }
        Self::cluster(shared_cluster().expect("the shared cluster")).await
    }

    /// A connection to the cluster of `nodes`.
    pub async fn cluster(nodes: Vec<String>) -> Self {
        let client = fence_redis::redis::cluster::ClusterClient::new(nodes).expect("cluster nodes");
        let connection = client.get_async_connection().await;
        RawRedis::Cluster(connection.expect("a cluster test connection"))
    }

    /// Runs `cmd`; panics on an error answer.
    pub async fn query(&mut self, cmd: &fence_redis::redis::Cmd) -> fence_redis::redis::Value {
        use fence_redis::redis::aio::ConnectionLike;
        let answer = match self {
            RawRedis::Standalone(c) => c.req_packed_command(cmd).await,
            RawRedis::Cluster(c) => c.req_packed_command(cmd).await,
        };
        answer.unwrap_or_else(|e| panic!("test command failed: {e}"))
    }
}

/// Deletes `domain`'s lease on the shared standalone server (where `fence` lives), as its TTL
/// would.
pub async fn expire_lease(fence: &Observed<RedisFence>, domain: &fence_core::Domain) {
    // fence-redis keeps a lease at `<prefix>:{<domain>}:lease`.
    let key = fence
        .user_key(domain, "x")
        .expect("a valid key")
        .replace(":u:x", ":lease");
    let url = shared_url().expect("the shared Redis");
    let mut raw = raw(&url).await;
    let _: () = fence_redis::redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut raw)
        .await
        .expect("DEL the lease");
}

/// A Redis Sentinel process owned by the test (`redis-server <conf> --sentinel`), watching one
/// master under a service name; killed when dropped.
pub struct RedisSentinel {
    /// The port it listens on.
    pub port: u16,
    process: ManagedProcess,
}

impl RedisSentinel {
    /// Starts a sentinel monitoring the master at `127.0.0.1:master_port` as `service`, with a
    /// quorum of `quorum`, declaring the master down after 1 s without an answer. `None` (loud
    /// skip) without redis-server.
    pub fn start(name: &str, service: &str, master_port: u16, quorum: u32) -> Option<Self> {
        if !have_redis_server() {
            unavailable("the redis-server binary")?;
        }
        Some(ManagedProcess::start(
            "redis-sentinel",
            "redis-tests",
            name,
            |process| {
                let sentinel = RedisSentinel {
                    port: free_port(),
                    process,
                };
                let dir = sentinel.process.dir();
                // The sentinel rewrites its configuration file: it must be its own and writable.
                let config = dir.join("sentinel.conf");
                std::fs::write(
                    &config,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
                         sentinel monitor {service} 127.0.0.1 {master_port} {quorum}\n\
                         sentinel down-after-milliseconds {service} 1000\n\
                         sentinel failover-timeout {service} 10000\n",
                        port = sentinel.port,
                        dir = dir.display(),
                    ),
                )
                .expect("sentinel.conf");
                let mut command = Command::new("redis-server");
                command.arg(&config).arg("--sentinel").stdout(Stdio::null());
                let port = sentinel.port;
                sentinel
                    .process
                    .spawn_and_wait(&mut command, port, Duration::from_secs(10), || {
                        answers(port)
                    })
                    .then_some(sentinel)
            },
        ))
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against it and returns the output.
    pub fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.port, args)
    }

    /// The port of the master it names for `service` now.
    pub fn master_port(&self, service: &str) -> Option<u16> {
        self.cli(&["SENTINEL", "get-master-addr-by-name", service])
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
    }
}

impl RedisServer {
    /// SIGKILL, without starting it again: a master that died.
    pub fn kill(&self) {
        self.process.kill();
    }
}
