//! A loopback TCP proxy for fault injection in adapter tests and torture runs: it forwards bytes
//! between a client and a real server, and on request holds them (a lagging link), loses
//! requests (cut before they reach the server), cuts a request in the middle, cuts right after a
//! request was sent, loses replies (cut on the reply), swallows everything (a black hole),
//! cuts every connection, or closes new connections as they arrive.
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use fence_conformance::proxy::TcpProxy;
//! let proxy = TcpProxy::start("127.0.0.1:6390".parse().unwrap()).await?;
//! // Point the client at `proxy.address()` instead of the server, then:
//! proxy.lose_replies(); // the next requests reach the server, their replies never come back
//! proxy.forward();
//! # Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with the bytes it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Forward both ways.
    Forward,
    /// Keep the bytes read in both directions until the mode changes: a link that lags.
    Hold,
    /// Forward requests to the server, but drop the first reply and close the connection:
    /// the request reached the server, and the client cannot know whether it ran. The
    /// connection is closed [`LINGER`] after the first reply bytes, not at once, so that the
    /// server has started the request by then: an HTTP/2 server (etcd's gRPC) answers a
    /// request with control frames first, and a close on those would cancel the request before
    /// it started (that fault is [`Mode::CutAfterRequest`]).
    LoseReplies,
    /// Drop the first request bytes and close the connection: nothing reaches the server, and
    /// the client cannot know that either.
    LoseRequests,
    /// Forward the first half of the next request bytes, then close the connection: the server
    /// sees a torn request.
    CutMidRequest,
    /// Forward the next request bytes, then close the connection before any reply.
    CutAfterRequest,
    /// Read and drop every byte both ways and keep the connection open: requests and replies
    /// vanish, and the client waits until its own timeout.
    BlackHole,
    /// Forward both ways until a request containing these bytes passes (a SQL `COMMIT`), then
    /// lose the reply to it as [`Mode::LoseReplies`] does: that one request ran, and the client
    /// cannot know whether it did.
    LoseReplyTo(&'static [u8]),
}

/// A running proxy; it stops (and closes every connection) when dropped.
#[derive(Debug)]
pub struct TcpProxy {
    address: SocketAddr,
    mode: watch::Sender<Mode>,
    cuts: watch::Sender<u64>,
    /// Whether new connections are closed as they arrive, and how many were.
    refusing: Arc<Refusing>,
    /// When any connection last carried bytes.
    activity: Activity,
    acceptor: JoinHandle<()>,
}

/// Whether the acceptor closes new connections, and how many it closed.
#[derive(Debug, Default)]
struct Refusing {
    on: AtomicBool,
    refused: AtomicU64,
}

/// The instant bytes last crossed the proxy, shared by its connections.
type Activity = Arc<Mutex<Instant>>;

impl TcpProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (mode, _) = watch::channel(Mode::Forward);
        let (cuts, _) = watch::channel(0);
        let activity = Arc::new(Mutex::new(Instant::now()));
        let refusing = Arc::new(Refusing::default());
        let acceptor = tokio::spawn(accept(
            listener,
            upstream,
            mode.clone(),
            cuts.clone(),
            refusing.clone(),
            activity.clone(),
        ));
        Ok(TcpProxy {
            address,
            mode,
            cuts,
            refusing,
            activity,
            acceptor,
        })
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Forwards both ways again (held bytes are delivered, in order).
    pub fn forward(&self) {
        self.mode.send_replace(Mode::Forward);
    }

    /// Holds every byte in both directions until [`TcpProxy::forward`].
    pub fn hold(&self) {
        self.mode.send_replace(Mode::Hold);
    }

    /// Lets requests through and loses replies, closing each connection that gets one
    /// [`LINGER`] later. A connection already losing its replies keeps losing them until it
    /// closes, whatever the mode is switched to meanwhile.
    pub fn lose_replies(&self) {
        self.mode.send_replace(Mode::LoseReplies);
    }

    /// Loses requests: the next request bytes of each connection are dropped, and it is closed.
    pub fn lose_requests(&self) {
        self.mode.send_replace(Mode::LoseRequests);
    }

    /// Switches to `mode` (every mode above is one of these).
    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Waits until no connection has carried a byte for `quiet` (a client's background traffic,
    /// such as a pool testing a connection it got back, has ended), so that a fault injected
    /// next lands on the request the test sends.
    /// Panics (failing the test) when they never go quiet within 10 s.
    pub async fn settle(&self, quiet: Duration) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let last = *self.activity.lock().unwrap_or_else(PoisonError::into_inner);
            let idle = last.elapsed();
            if idle >= quiet {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the proxied connections never went quiet for {quiet:?}"
            );
            tokio::time::sleep(quiet - idle).await;
        }
    }

    /// Closes every open connection now (new ones are accepted).
    pub fn cut_all(&self) {
        self.cuts.send_modify(|generation| *generation += 1);
    }

    /// Closes each new connection as it arrives (open ones go on in the current mode), until
    /// `false`: a server that stopped accepting, seen only by a client that connects afresh.
    pub fn refuse_new_connections(&self, refuse: bool) {
        self.refusing.on.store(refuse, Ordering::SeqCst);
    }

    /// How many connections [`TcpProxy::refuse_new_connections`] closed so far.
    pub fn refused_connections(&self) -> u64 {
        self.refusing.refused.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut_all();
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    cuts: watch::Sender<u64>,
    refusing: Arc<Refusing>,
    activity: Activity,
) {
    while let Ok((client, _)) = listener.accept().await {
        if refusing.on.load(Ordering::SeqCst) {
            refusing.refused.fetch_add(1, Ordering::SeqCst);
            continue; // dropping the client closes it
        }
        let Ok(server) = TcpStream::connect(upstream).await else {
            continue; // dropping the client refuses it, as the server would
        };
        // Subscribed before the task runs: a cut from now on reaches this connection.
        let (mode, mut cut) = (mode.subscribe(), cuts.subscribe());
        let activity = activity.clone();
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            // Set by the request side when the request whose reply is to be lost passed.
            let lose_next_reply = Arc::new(AtomicBool::new(false));
            let mut requests = tokio::spawn(pump(
                client_read,
                server_write,
                mode.clone(),
                false,
                activity.clone(),
                lose_next_reply.clone(),
            ));
            let mut replies = tokio::spawn(pump(
                server_read,
                client_write,
                mode,
                true,
                activity,
                lose_next_reply,
            ));
            // Either direction ending (or a cut) closes the whole connection.
            tokio::select! {
                _ = &mut requests => {}
                _ = &mut replies => {}
                _ = cut.changed() => {}
            }
            requests.abort();
            replies.abort();
        });
    }
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    replies: bool,
    activity: Activity,
    lose_next_reply: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        *activity.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        let current = loop {
            let current = *mode.borrow_and_update();
            if current != Mode::Hold {
                break current;
            }
            if mode.changed().await.is_err() {
                return;
            }
        };
        let forward = match (current, replies) {
            (Mode::BlackHole, _) => continue,
            (Mode::LoseReplies, true) => return linger_then_close(from).await,
            (Mode::LoseReplyTo(_), true) if lose_next_reply.load(Ordering::SeqCst) => {
                return linger_then_close(from).await
            }
            (Mode::LoseReplyTo(needle), false) => {
                // One read holds the whole of a short request (a `COMMIT` packet).
                if !needle.is_empty() && buffer[..n].windows(needle.len()).any(|w| w == needle) {
                    lose_next_reply.store(true, Ordering::SeqCst);
                }
                n
            }
            (Mode::LoseRequests, false) => return,
            (Mode::CutMidRequest, false) => {
                let _ = to.write_all(&buffer[..n.div_ceil(2)]).await;
                return;
            }
            (Mode::CutAfterRequest, false) => {
                let _ = to.write_all(&buffer[..n]).await;
                let _ = to.flush().await;
                return;
            }
            _ => n,
        };
        if to.write_all(&buffer[..forward]).await.is_err() {
            return;
        }
    }
}

/// How long a connection losing its replies stays open, dropping what the server sends, before
/// it is closed: time for the server to run the request whose reply is lost.
pub const LINGER: Duration = Duration::from_millis(250);

/// Drops every byte `from` sends for [`LINGER`], then returns (closing the connection).
async fn linger_then_close(mut from: OwnedReadHalf) {
    let mut sink = vec![0u8; 16 * 1024];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(1..) = from.read(&mut sink).await {}
    })
    .await;
}
