//! A leader elected through etcd that writes to Redis with the etcd-issued token, and a second
//! instance that takes over when the first is frozen (SIGSTOP): the coordinator + resource
//! story end to end, with real processes.
//!
//! `cargo run -p fence-etcd --example etcd_leader` (etcd at `FENCE_ETCD_ENDPOINTS`, else
//! `http://127.0.0.1:2479`; Redis at `FENCE_REDIS_URL`, else `redis://127.0.0.1:6390`: the
//! servers `scripts/test` starts).
//!
//! The run starts worker A, which becomes leader (its etcd lease's lock key revision is its
//! token), claims the Redis domain and writes a tick every 200 ms; then worker B, which waits
//! for the lease. A is frozen with SIGSTOP: no keep-alive reaches etcd, the lease expires, B
//! becomes leader with a greater token and claims Redis. A is resumed: its guard signals the
//! loss, and the write it had under way carries its old token, so Redis refuses it. Exit code
//! 0 only if all of that happened.

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use fence_core::env::Env;
use fence_core::{
    Domain, Fence, FenceError, FencedStore, FencedStoreExt, LeaseGuard, LeaseOptions, Observed,
    OwnerId, Retirer,
};
use fence_etcd::Etcd;
use fence_redis::{RedisFence, RedisFenceBuilder};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The domain the workers lead and write.
const DOMAIN: &str = "reports/daily";
const TTL: Duration = Duration::from_secs(3);
const TICK: Duration = Duration::from_millis(200);

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => supervise().await,
        ["worker", name, run] => worker(name, run).await,
        ["--help" | "-h"] => {
            println!(
                "usage: etcd_leader   (runs the whole story; see the file's docs)\n\n\
                 FENCE_ETCD_ENDPOINTS  etcd (default http://127.0.0.1:2479)\n\
                 FENCE_REDIS_URL       Redis (default redis://127.0.0.1:6390)\n\
                 the defaults are the servers `scripts/services up` starts"
            );
            Ok(())
        }
        _ => Err("usage: etcd_leader [--help]".into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("etcd_leader failed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The environment, with the project's servers as defaults.
fn settings() -> Env {
    Env::process().or_else(Env::from_pairs([
        (fence_etcd::env::ENDPOINTS, "http://127.0.0.1:2479"),
        (fence_redis::env::URL, "redis://127.0.0.1:6390"),
    ]))
}

/// A server the example could not use: where it tried, and what to set.
fn unreachable(what: &str, variable: &str, error: impl std::fmt::Display) -> Error {
    let address = fence_core::env::redact_url(&settings().get(variable).unwrap_or_default());
    format!(
        "could not use {what} at {address}: {error}\n  set {variable} to your server, or start the project's servers: scripts/services up"
    )
    .into()
}

/// etcd under the run's own prefix.
async fn etcd(run: &str) -> Result<Etcd, Error> {
    let env = Env::from_pairs([(fence_etcd::env::PREFIX, format!("/fence-demo/{run}"))])
        .or_else(settings());
    Etcd::from_env_with(&env)
        .await
        .map_err(|e| unreachable("etcd", fence_etcd::env::ENDPOINTS, e))
}

/// Redis under the run's own prefix.
async fn redis(run: &str) -> Result<Observed<RedisFence>, Error> {
    let env = Env::from_pairs([(fence_redis::env::PREFIX, format!("fence-demo:{run}"))])
        .or_else(settings());
    RedisFenceBuilder::from_env_with(&env)
        .map_err(|e| unreachable("Redis", fence_redis::env::URL, e))?
        .connect()
        .await
        .map_err(|e| unreachable("Redis", fence_redis::env::URL, e))
}

/// One instance: wait for the lease, claim Redis, write ticks until fenced.
async fn worker(name: &str, run: &str) -> Result<(), Error> {
    let etcd = etcd(run).await?;
    let redis = redis(run).await?;
    let domain = Domain::new(DOMAIN)?;
    let options = LeaseOptions::new(TTL).wait(Duration::from_secs(60));
    let guard = LeaseGuard::acquire(
        Arc::new(etcd.leases()),
        &domain,
        &OwnerId::new(name)?,
        options,
    )
    .await?;
    let token = guard.token();
    redis.claim(&domain, token).await?;
    println!("LEADER {token}");
    for tick in 1.. {
        tokio::time::sleep(TICK).await;
        // A real worker stops starting work once the loss is signalled; the write already
        // under way when it froze goes out regardless, and the resource decides.
        if guard.is_lost() {
            println!("NOTICE the guard signalled the loss; the write under way goes out anyway");
        }
        match redis
            .put(&domain, token, format!("tick {tick} by {name}"))
            .await
        {
            Ok(_) => println!("WROTE {tick}"),
            Err(FenceError::Fenced { current, .. }) => {
                println!("FENCED {token} {current}");
                let reason = tokio::time::timeout(TTL, guard.lost()).await?;
                println!("LOST the guard signals: {reason}");
                return Ok(());
            }
            Err(other) => return Err(other.into()),
        }
    }
    Ok(())
}

/// A worker process and its output lines (echoed as they come).
struct Worker {
    name: &'static str,
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Worker {
    fn start(name: &'static str, run: &str) -> Result<Worker, Error> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["worker", name, run])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let (send, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                println!("  [{name}] {line}");
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Worker { name, child, lines })
    }

    /// Reads lines (echoing them) until one starts with `word`; its remaining fields.
    async fn until(&mut self, word: &str, within: Duration) -> Result<Vec<String>, Error> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv())
                .await
                .map_err(|_| format!("worker {} said no `{word}` within {within:?}", self.name))?
                .ok_or_else(|| format!("worker {} ended before `{word}`", self.name))?;
            let mut fields = line.split(' ');
            if fields.next() == Some(word) {
                return Ok(fields.map(String::from).collect());
            }
        }
    }

    fn signal(&self, signal: &str) -> Result<(), Error> {
        let pid = self.child.id().ok_or("the worker has exited")?;
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -{signal} {pid}").into())
        }
    }
}

async fn supervise() -> Result<(), Error> {
    let run = format!("etcd-leader-{}", std::process::id());
    // Both servers answer before any worker starts, or the run says which one does not.
    let (etcd, check) = (etcd(&run).await?, redis(&run).await?);
    let env = settings();
    println!(
        "etcd {}, Redis {}",
        env.get(fence_etcd::env::ENDPOINTS).unwrap_or_default(),
        check.target()
    );
    let outcome = story(&run, &check).await;
    // What the run wrote is removed whatever happened: its etcd keys and its Redis keys.
    let mut client = etcd.client().clone();
    let _ = client
        .delete(
            format!("/fence-demo/{run}"),
            Some(fence_etcd::etcd_client::DeleteOptions::new().with_prefix()),
        )
        .await;
    let _ = check.retire(&Domain::new(DOMAIN)?).await;
    outcome
}

async fn story(run: &str, check: &Observed<RedisFence>) -> Result<(), Error> {
    let mut a = Worker::start("a", run)?;
    let a_token: u64 = a.until("LEADER", Duration::from_secs(30)).await?[0].parse()?;
    a.until("WROTE", Duration::from_secs(10)).await?;
    let mut b = Worker::start("b", run)?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    println!("freezing worker a (SIGSTOP) past its {TTL:?} lease");
    a.signal("STOP")?;
    let b_token: u64 = b.until("LEADER", TTL * 5).await?[0].parse()?;
    b.until("WROTE", Duration::from_secs(10)).await?;
    if b_token <= a_token {
        return Err(format!("b's token {b_token} is not above a's {a_token}").into());
    }

    println!("resuming worker a (SIGCONT)");
    a.signal("CONT")?;
    let fenced = a.until("FENCED", Duration::from_secs(10)).await?;
    if fenced != [a_token.to_string(), b_token.to_string()] {
        return Err(format!("a was fenced with {fenced:?}").into());
    }
    a.until("LOST", TTL).await?;
    let status = a.child.wait().await?;
    if !status.success() {
        return Err(format!("worker a ended with {status}").into());
    }
    b.until("WROTE", Duration::from_secs(10)).await?;

    let snapshot = check.read(&Domain::new(DOMAIN)?).await?;
    let by_b = snapshot
        .value()
        .is_some_and(|v| String::from_utf8_lossy(v).ends_with("by b"));
    b.child.kill().await?; // its etcd lease expires with it
    if !by_b {
        return Err(format!("the value is not b's: {snapshot:?}").into());
    }
    println!(
        "ok: a (token {a_token}) was frozen, b took over with token {b_token}, and Redis fenced a's late write"
    );
    Ok(())
}
