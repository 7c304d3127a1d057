//! The faults a run injects besides worker pauses: connections cut before sending, in the
//! middle of a request, right after sending and on the reply, delays and black holes (by
//! [`TcpProxy`], a loopback proxy between the clients and the server), and a paused or killed
//! and restarted server (by whatever owns its process).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::proxy::{Mode, TcpProxy};

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultKind {
    /// Requests are dropped and their connections closed: nothing reached the server.
    CutBeforeSend,
    /// Half of a request reaches the server, then the connection closes.
    CutMidRequest,
    /// A request reaches the server, then the connection closes before any reply.
    CutAfterSend,
    /// Requests run, their replies are lost and the connections closed.
    CutReply,
    /// Bytes are held both ways, then delivered in order: a lagging link.
    Delay,
    /// Bytes vanish both ways on open connections until the clients time out.
    BlackHole,
    /// The server process is stopped (SIGSTOP) and continued (SIGCONT).
    PauseServer,
    /// The server is killed (SIGKILL) and started again on its data.
    Restart,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 8] = [
        FaultKind::CutBeforeSend,
        FaultKind::CutMidRequest,
        FaultKind::CutAfterSend,
        FaultKind::CutReply,
        FaultKind::Delay,
        FaultKind::BlackHole,
        FaultKind::PauseServer,
        FaultKind::Restart,
    ];

    /// The kinds a proxy injects.
    pub const NETWORK: [FaultKind; 6] = [
        FaultKind::CutBeforeSend,
        FaultKind::CutMidRequest,
        FaultKind::CutAfterSend,
        FaultKind::CutReply,
        FaultKind::Delay,
        FaultKind::BlackHole,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::CutBeforeSend => "cut before sending",
            FaultKind::CutMidRequest => "cut mid-request",
            FaultKind::CutAfterSend => "cut after sending",
            FaultKind::CutReply => "cut on the reply",
            FaultKind::Delay => "delay",
            FaultKind::BlackHole => "black hole",
            FaultKind::PauseServer => "server paused",
            FaultKind::Restart => "server kill -9 and restart",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What injects faults into one target.
#[async_trait]
pub trait Faults: Send + Sync {
    /// The kinds this target can inject.
    fn kinds(&self) -> Vec<FaultKind>;

    /// Starts a fault of `kind`.
    async fn inject(&self, kind: FaultKind);

    /// Ends the fault of `kind` started last.
    async fn heal(&self, kind: FaultKind);
}

/// The server's process, for pauses and restarts.
pub trait ServerProcess: Send + Sync {
    /// Kills the server with SIGKILL and starts it again on its data; returns once it serves.
    fn kill_and_restart(&self);

    /// Sends `signal` (`STOP`, `CONT`) to the server.
    fn signal(&self, signal: &str);
}

/// Network faults through a proxy, plus restarts (and pauses) when the server's process is known.
pub struct ProxyFaults {
    proxy: Arc<TcpProxy>,
    server: Option<ServerFaults>,
}

impl ProxyFaults {
    /// Faults through `proxy` (the clients under test connect to it).
    pub fn new(proxy: Arc<TcpProxy>) -> Self {
        ProxyFaults {
            proxy,
            server: None,
        }
    }

    /// Also kills and restarts `server`.
    pub fn with_server(mut self, server: Arc<dyn ServerProcess>) -> Self {
        self.server = Some(ServerFaults {
            server,
            pauses: false,
            restarts: true,
        });
        self
    }

    /// Also pauses the server (SIGSTOP/SIGCONT): for servers that are one process.
    pub fn with_pauses(mut self) -> Self {
        if let Some(server) = &mut self.server {
            server.pauses = true;
        }
        self
    }

    /// No kill -9 restarts of the server, only pauses: for a server whose crash the backend
    /// itself cannot recover from unaided (a single Apache Kafka node, see fence-kafka's
    /// README), whose restarts are exercised on a cluster instead.
    pub fn without_restarts(mut self) -> Self {
        if let Some(server) = &mut self.server {
            server.restarts = false;
        }
        self
    }
}

impl fmt::Debug for ProxyFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyFaults")
            .field("proxy", &self.proxy.address())
            .field("server", &self.server)
            .finish()
    }
}

#[async_trait]
impl Faults for ProxyFaults {
    fn kinds(&self) -> Vec<FaultKind> {
        let mut kinds = FaultKind::NETWORK.to_vec();
        if let Some(server) = &self.server {
            kinds.extend(server.kinds());
        }
        kinds
    }

    async fn inject(&self, kind: FaultKind) {
        let mode = match kind {
            FaultKind::CutBeforeSend => Mode::LoseRequests,
            FaultKind::CutMidRequest => Mode::CutMidRequest,
            FaultKind::CutAfterSend => Mode::CutAfterRequest,
            FaultKind::CutReply => Mode::LoseReplies,
            FaultKind::Delay => Mode::Hold,
            FaultKind::BlackHole => Mode::BlackHole,
            _ => {
                if let Some(server) = &self.server {
                    server.inject(kind).await;
                }
                return;
            }
        };
        self.proxy.set_mode(mode);
    }

    async fn heal(&self, kind: FaultKind) {
        match kind {
            FaultKind::PauseServer | FaultKind::Restart => {
                if let Some(server) = &self.server {
                    server.heal(kind).await;
                }
            }
            FaultKind::BlackHole => {
                self.proxy.forward();
                // Black-holed connections stay open until cut; what they swallowed is gone.
                self.proxy.cut_all();
            }
            _ => self.proxy.forward(),
        }
    }
}

/// Faults on a server the clients reach directly (no proxy can sit in between, e.g. a Kafka
/// broker, which tells clients its own address): pauses (SIGSTOP/SIGCONT, which also black-hole
/// every open connection) and, where the server survives them, kill -9 restarts.
pub struct ServerFaults {
    server: Arc<dyn ServerProcess>,
    pauses: bool,
    restarts: bool,
}

impl ServerFaults {
    /// Pauses `server`.
    pub fn new(server: Arc<dyn ServerProcess>) -> Self {
        ServerFaults {
            server,
            pauses: true,
            restarts: false,
        }
    }

    /// Also kills and restarts it.
    pub fn with_restarts(mut self) -> Self {
        self.restarts = true;
        self
    }
}

impl fmt::Debug for ServerFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerFaults")
            .field("pauses", &self.pauses)
            .field("restarts", &self.restarts)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Faults for ServerFaults {
    fn kinds(&self) -> Vec<FaultKind> {
        let mut kinds = Vec::new();
        if self.restarts {
            kinds.push(FaultKind::Restart);
        }
        if self.pauses {
            kinds.push(FaultKind::PauseServer);
        }
        kinds
    }

    async fn inject(&self, kind: FaultKind) {
        let server = self.server.clone();
        // Process control blocks (a restart waits until the server serves).
        let _ = tokio::task::spawn_blocking(move || match kind {
            FaultKind::PauseServer => server.signal("STOP"),
            FaultKind::Restart => server.kill_and_restart(),
            _ => {}
        })
        .await;
    }

    async fn heal(&self, kind: FaultKind) {
        if kind == FaultKind::PauseServer {
            let server = self.server.clone();
            let _ = tokio::task::spawn_blocking(move || server.signal("CONT")).await;
        }
    }
}
