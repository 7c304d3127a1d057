//! etcd: the shared server `scripts/test` starts, and dedicated single-member servers a test
//! owns (to kill -9, stop and restart them).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::process::ManagedProcess;
use crate::{free_port, listens, unavailable};

/// The shared server's client endpoints (`FENCE_ETCD_ENDPOINTS`, comma-separated), if the
/// first one listens.
pub fn shared_endpoints() -> Option<Vec<String>> {
    let endpoints =
        std::env::var("FENCE_ETCD_ENDPOINTS").unwrap_or_else(|_| "http://127.0.0.1:2479".into());
    let endpoints: Vec<String> = endpoints.split(',').map(String::from).collect();
    if endpoints
        .iter()
        .all(|e| crate::shared_server_answers(e, || listens(&address(e))))
    {
        Some(endpoints)
    } else {
        unavailable(&format!("the shared etcd at {endpoints:?}")).map(|_| Vec::new())
    }
}

/// The `host:port` of an `http://host:port` endpoint.
pub fn address(endpoint: &str) -> String {
    endpoint
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned()
}

/// A key prefix of its own for `test` (no `/` inside, so prefixes never nest).
pub fn unique_prefix(test: &str) -> String {
    format!("/ft-{test}-{}", crate::unique_suffix())
}

/// True when etcd on `port` answers its health check: it binds the client port before it has
/// replayed its log and elected itself, so a listening port is not yet a server.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let mut reply = String::new();
    stream.write_all(request).is_ok()
        && stream.read_to_string(&mut reply).is_ok()
        && reply.contains("\"health\":\"true\"")
}

/// A single-member etcd owned by the test (its own ports and data dir), killed when dropped.
pub struct EtcdServer {
    /// The client port.
    pub port: u16,
    peer_port: u16,
    process: ManagedProcess,
}

impl EtcdServer {
    /// Starts a server on free ports; `None` (loud skip) without the `etcd` binary.
    pub fn start(name: &str) -> Option<Self> {
        let have_etcd = Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !have_etcd {
            unavailable("the etcd binary (Debian etcd-server; run scripts/test)")?;
            return None;
        }
        Some(ManagedProcess::start(
            "etcd",
            "etcd-tests",
            name,
            |process| {
                let server = EtcdServer {
                    port: free_port(),
                    peer_port: free_port(),
                    process,
                };
                server.spawn().then_some(server)
            },
        ))
    }

    /// Starts etcd on its ports and data dir; false if a port turned out to be taken.
    fn spawn(&self) -> bool {
        let dir = self.process.dir();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("etcd.log"))
            .expect("log file");
        let client = format!("http://127.0.0.1:{}", self.port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut command = Command::new("etcd");
        command
            .args(["--name", "fence-test", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("fence-test={peer}")])
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log));
        let port = self.port;
        self.process
            .spawn_and_wait(&mut command, port, Duration::from_secs(20), || {
                healthy(port)
            })
    }

    /// Its client endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, as a crash.
    pub fn kill(&self) {
        self.process.kill();
    }

    /// SIGKILL (a crash) and start again on the same ports and data.
    pub fn kill_and_restart(&self) {
        self.process.kill();
        self.restart();
    }

    /// Starts it again after [`EtcdServer::kill`], on the same ports and data.
    pub fn restart(&self) {
        if !self.spawn() {
            let log =
                std::fs::read_to_string(self.process.dir().join("etcd.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!(
                "etcd did not come back on port {}; its log ends:\n{}",
                self.port,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server.
    pub fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }
}
