//! Redis: fenced write vs SET, fenced user script vs the bare script.

use std::sync::Arc;

use bytes::Bytes;
use fence_core::{Domain, FencedStore, FencingToken, Observed, WriteRequest};
use fence_redis::redis::aio::ConnectionManager;
use fence_redis::redis::{self, AsyncCommands};
use fence_redis::{FencedScript, RedisFence, ScriptCall};

use crate::measure::{compare, done, Plan, CONCURRENCY};
use crate::probe::Probe;
use crate::report::Row;

const SCRIPT: &str = "redis.call('HSET', KEYS[1], 'field', ARGV[1]) return 1";

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::note("redis", "all cases", error)],
    }
}

/// What both Redis benchmarks start from: a fence under a fresh prefix, a raw connection to
/// the same server, a 1 KiB payload and 64 domains named `<stem><i>`.
pub(crate) struct Setup {
    pub(crate) url: String,
    pub(crate) fence: Observed<RedisFence>,
    pub(crate) raw: ConnectionManager,
    pub(crate) run: u128,
    pub(crate) payload: Bytes,
    pub(crate) domains: Arc<Vec<Domain>>,
    /// The server's CPU and command statistics.
    pub(crate) probe: Probe,
}

/// The pid file `scripts/services` keeps for the Redis server on `url`'s port.
pub(crate) fn pid_file(url: &str) -> String {
    let port = url
        .rsplit(':')
        .next()
        .and_then(|tail| tail.split('/').next())
        .unwrap_or("6379");
    format!("redis/{port}/redis.pid")
}

pub(crate) async fn setup(prefix: &str, stem: &str) -> Result<Setup, String> {
    let url = std::env::var("FENCE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into());
    let run = crate::measure::run_id();
    let fence = RedisFence::builder()
        .url(&url)
        .prefix(format!("{prefix}-{run}"))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let raw = ConnectionManager::new(redis::Client::open(url.as_str()).map_err(|e| e.to_string())?)
        .await
        .map_err(|e| e.to_string())?;
    let domains = (0..64)
        .map(|i| Domain::new(format!("{stem}{i}")))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let probe = Probe::redis(&url, &pid_file(&url)).await;
    Ok(Setup {
        probe,
        url,
        fence,
        raw,
        run,
        payload: Bytes::from(vec![b'x'; 1024]),
        domains: Arc::new(domains),
    })
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let Setup {
        url,
        fence,
        raw,
        run,
        payload,
        domains,
        probe,
    } = setup("bench", "d").await?;
    // The same prefix: the waiting fence writes the same domains, on the server with a replica.
    let waiting = RedisFence::builder()
        .url(&url)
        .prefix(fence.prefix())
        .wait_for_replicas(1, fence_redis::DEFAULT_REPLICA_WAIT)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let token = FencingToken::MIN;
    let mut rows = Vec::new();
    for concurrency in CONCURRENCY {
        let plan = Plan {
            rounds: 10,
            batch: 400 * concurrency.min(4),
            concurrency,
            group: 1,
        };
        let (f, d, p) = (fence.clone(), domains.clone(), payload.clone());
        let (conn, p2) = (raw.clone(), payload.clone());
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let (fence, request) = (
                    f.clone(),
                    WriteRequest::put(d[i % d.len()].clone(), token, p.clone()),
                );
                async move { done(fence.write(&request).await) }
            },
            move |i| {
                let (mut conn, value, key) = (
                    conn.clone(),
                    p2.clone(),
                    format!("bench-{run}-set-{}", i % 64),
                );
                async move {
                    conn.set::<_, _, ()>(key, &value[..])
                        .await
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await;
        rows.push(Row::new(
            "redis",
            "write 1 KiB vs SET",
            concurrency,
            &fenced,
            &unfenced,
        ));

        // The replicated deployments' default (Sentinel): every change waits for a replica.
        let waiting = waiting.clone();
        let (f, d, p) = (fence.clone(), domains.clone(), payload.clone());
        let (w, d2, p2) = (waiting.clone(), domains.clone(), payload.clone());
        let write = |fence: Observed<RedisFence>, request: WriteRequest| async move {
            done(fence.write(&request).await)
        };
        let (waited, unwaited) = compare(
            plan,
            &probe,
            move |i| {
                write(
                    w.clone(),
                    WriteRequest::put(d2[i % d2.len()].clone(), token, p2.clone()),
                )
            },
            move |i| {
                write(
                    f.clone(),
                    WriteRequest::put(d[i % d.len()].clone(), token, p.clone()),
                )
            },
        )
        .await;
        rows.push(Row::new(
            "redis",
            "write with WAIT 1 (a replica) vs without",
            concurrency,
            &waited,
            &unwaited,
        ));

        let script = Arc::new(FencedScript::new(SCRIPT));
        let bare = Arc::new(redis::Script::new(SCRIPT));
        let (f, d, p) = (fence.clone(), domains.clone(), payload.clone());
        let (f2, d2, p2, conn) = (fence.clone(), domains.clone(), payload.clone(), raw.clone());
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let (fence, script) = (f.clone(), script.clone());
                let call = ScriptCall::new(d[i % d.len()].clone(), token)
                    .key("h")
                    .arg(&p[..]);
                async move { done(fence.run_script(&script, &call).await) }
            },
            move |i| {
                let (bare, mut conn, value) = (bare.clone(), conn.clone(), p2.clone());
                let key = f2.user_key(&d2[i % d2.len()], "h");
                async move {
                    let key = key.map_err(|e| e.to_string())?;
                    bare.key(key)
                        .arg(&value[..])
                        .invoke_async::<i64>(&mut conn)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await;
        rows.push(Row::new(
            "redis",
            "user script vs bare script",
            concurrency,
            &fenced,
            &unfenced,
        ));
    }
    Ok(rows)
}
