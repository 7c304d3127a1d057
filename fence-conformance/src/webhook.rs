//! A real HTTP receiver on 127.0.0.1 that behaves like a payment API: it applies each
//! Idempotency-Key once, replays the first answer to retries, refuses a key reused with another
//! payload (422), and can be told to fail or hang.
//!
//! Paths steer failures per request: `/ok`, `/fail/<n>` (the first n requests of each key get
//! 503), `/lost/<n>` (the first n are applied but answered 503, like a lost response),
//! `/always-500`, `/reject` (422), `/hang/<n>` (the first n requests of each key never answer).
// A broken set-up or a breached contract fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// One applied effect, in the order the server applied them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The idempotency key.
    pub key: String,
    /// The request path.
    pub path: String,
    /// The payload.
    pub payload: Bytes,
}

#[derive(Default)]
struct State {
    applied: Vec<Applied>,
    by_key: HashMap<String, Bytes>,
    requests: HashMap<String, u32>,
    total_requests: u64,
    /// Keys whose success (2xx) was answered, and requests that came for them afterwards.
    answered_ok: std::collections::HashSet<String>,
    after_success: u64,
}

/// The running server; dropped with the test's runtime.
#[derive(Clone)]
pub struct WebhookServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl WebhookServer {
    /// Starts the server on a free loopback port.
    pub async fn start() -> WebhookServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("local addr");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        WebhookServer { addr, state }
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Effects applied, in order (each key at most once).
    pub fn applied(&self) -> Vec<Applied> {
        self.state.lock().unwrap().applied.clone()
    }

    /// Requests received for `key`, applied or not.
    pub fn requests_for(&self, key: &str) -> u32 {
        self.state
            .lock()
            .unwrap()
            .requests
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Requests received in total.
    /// Requests for keys whose success had already been answered: a delivery the relay should
    /// have known was done (0 unless a relay lost its mark, e.g. it was killed in between).
    /// Unlike `applied`, this is not hidden by the receiver's deduplication.
    pub fn requests_after_success(&self) -> u64 {
        self.state.lock().unwrap().after_success
    }

    /// Every request received, retries included.
    pub fn total_requests(&self) -> u64 {
        self.state.lock().unwrap().total_requests
    }
}

fn answer(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response
}

fn first_n(path: &str, prefix: &str) -> Option<u32> {
    path.strip_prefix(prefix)?.split('/').next()?.parse().ok()
}

async fn handle(
    state: Arc<Mutex<State>>,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let key = request
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let payload = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(answer(StatusCode::BAD_REQUEST, "unreadable body")),
    };
    let Some(key) = key else {
        return Ok(answer(StatusCode::BAD_REQUEST, "missing Idempotency-Key"));
    };
    let nth = {
        let mut s = state.lock().unwrap();
        s.total_requests += 1;
        if s.answered_ok.contains(&key) {
            s.after_success += 1;
        }
        let n = s.requests.entry(key.clone()).or_insert(0);
        *n += 1;
        *n
    };
    if let Some(n) = first_n(&path, "/hang/") {
        if nth <= n {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
    if path == "/always-500" {
        return Ok(answer(StatusCode::INTERNAL_SERVER_ERROR, "boom"));
    }
    if path == "/reject" {
        return Ok(answer(StatusCode::UNPROCESSABLE_ENTITY, "card declined"));
    }
    if first_n(&path, "/fail/").is_some_and(|n| nth <= n) {
        return Ok(answer(StatusCode::SERVICE_UNAVAILABLE, "try later"));
    }
    let mut s = state.lock().unwrap();
    match s.by_key.get(&key) {
        Some(first) if *first != payload => {
            return Ok(answer(
                StatusCode::UNPROCESSABLE_ENTITY,
                "key reused with another payload",
            ))
        }
        Some(_) => {} // a retry: replay the first answer below without applying again
        None => {
            s.by_key.insert(key.clone(), payload.clone());
            s.applied.push(Applied {
                key: key.clone(),
                path: path.clone(),
                payload,
            });
        }
    }
    drop(s);
    if first_n(&path, "/lost/").is_some_and(|n| nth <= n) {
        return Ok(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            "applied, but the answer is lost",
        ));
    }
    state.lock().unwrap().answered_ok.insert(key);
    Ok(answer(StatusCode::OK, "{\"status\":\"applied\"}"))
}
