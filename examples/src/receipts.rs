//! A local receipt webhook for the outbox example: it applies each Idempotency-Key once, as an
//! email or payment API does, and remembers what it applied.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::Timeline;

/// Receipts applied, by idempotency key, and requests seen in total.
#[derive(Debug, Default)]
struct Ledger {
    applied: BTreeMap<String, Bytes>,
    requests: usize,
}

/// A running receipt webhook on 127.0.0.1.
#[derive(Clone, Debug)]
pub struct ReceiptWebhook {
    addr: SocketAddr,
    ledger: Arc<Mutex<Ledger>>,
}

impl ReceiptWebhook {
    /// Binds 127.0.0.1 on a free port and serves until the runtime ends.
    pub async fn start(clock: Timeline) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let shared = ledger.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let ledger = shared.clone();
                let service = service_fn(move |request| receive(ledger.clone(), clock, request));
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        Ok(ReceiptWebhook { addr, ledger })
    }

    /// The URL receipts are POSTed to.
    pub fn url(&self) -> String {
        format!("http://{}/receipts", self.addr)
    }

    /// (receipts applied, requests received).
    pub fn counts(&self) -> (usize, usize) {
        let ledger = self.ledger.lock().unwrap_or_else(PoisonError::into_inner);
        (ledger.applied.len(), ledger.requests)
    }

    /// Waits until a receipt was applied, or `within` has passed.
    pub async fn wait_for_first(&self, within: std::time::Duration) {
        let deadline = std::time::Instant::now() + within;
        while self.counts().0 == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Reads a domain's outbox entries with `entries` until none is pending or `deadline` passes,
/// and returns the last read.
pub async fn settled_entries<F, Fut>(
    deadline: std::time::Instant,
    mut entries: F,
) -> Result<Vec<fence_outbox::OutboxEntry>, fence_outbox::OutboxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<
        Output = Result<Vec<fence_outbox::OutboxEntry>, fence_outbox::OutboxError>,
    >,
{
    loop {
        let read = entries().await?;
        let done = read
            .iter()
            .all(|e| !matches!(e.status, fence_outbox::EntryStatus::Pending { .. }));
        if done || std::time::Instant::now() > deadline {
            return Ok(read);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

async fn receive(
    ledger: Arc<Mutex<Ledger>>,
    clock: Timeline,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let status = match key {
        None => StatusCode::BAD_REQUEST,
        Some(key) => {
            let mut ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
            ledger.requests += 1;
            let first = !ledger.applied.contains_key(&key);
            if first {
                ledger.applied.insert(key.clone(), body.clone());
            }
            clock.say(
                "W",
                format!(
                    "webhook: receipt {} (Idempotency-Key {key}) -> {}",
                    String::from_utf8_lossy(&body),
                    if first {
                        "sent the email"
                    } else {
                        "already sent, replayed"
                    }
                ),
            );
            StatusCode::OK
        }
    };
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    Ok(response)
}
