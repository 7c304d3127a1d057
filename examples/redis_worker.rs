//! A worker that takes a Redis lease, gets its fencing token, and fences its own Lua mutation
//! (a balance in a hash, an entry in a stream, a counter) with it.
//!
//! `cargo run --features servers --example redis_worker` (Redis at `FENCE_REDIS_URL`, else the project's Redis:
//! `scripts/services up`). Ctrl-c or SIGTERM stops the story; the run's keys are removed in
//! every case.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fence_core::{
    Domain, Fence, FenceError, LeaseGuard, LeaseManager, LeaseOptions, Observed, OwnerId,
};
use fence_examples::{local, Timeline, Unreachable};
use fence_redis::{FencedScript, RedisFence, ScriptCall};

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
redis_worker: a worker takes a Redis lease and fences its own Lua mutation (a balance, a
stream entry, a counter) with its token; after a takeover its late credit is refused.

Usage: cargo run --features servers --example redis_worker";

/// Credits an account: balance, ledger stream and operation count change together, or not at all.
const CREDIT: &str = r#"
    local balance = redis.call('HINCRBY', KEYS[1], 'balance', ARGV[1])
    redis.call('XADD', KEYS[2], '*', 'amount', ARGV[1], 'by', ARGV[2])
    redis.call('INCR', KEYS[3])
    return balance
"#;

/// The worker's Redis: `FENCE_REDIS_URL`, else the project's. A Redis Cluster is
/// `.cluster(nodes)` and Sentinel `.sentinel(sentinels, service)` instead of `.url(..)`;
/// `RedisFenceBuilder::from_env()` reads all of them from the `FENCE_REDIS_*` variables.
async fn connect() -> Result<Observed<RedisFence>, Error> {
    let url = std::env::var("FENCE_REDIS_URL").unwrap_or_else(|_| local::REDIS_URL.to_owned());
    let fence = RedisFence::builder()
        .url(&url)
        .connection_timeout(Duration::from_secs(3))
        .connect()
        .await
        .map_err(|e| Unreachable::new("Redis", &url, "FENCE_REDIS_URL", e))?;
    Ok(fence)
}

async fn credit(
    fence: &Observed<RedisFence>,
    script: &FencedScript,
    domain: &Domain,
    token: fence_core::FencingToken,
    amount: i64,
    by: &str,
) -> Result<i64, FenceError> {
    let call = ScriptCall::new(domain.clone(), token)
        .key("account")
        .key("ledger")
        .key("operations")
        .arg(amount.to_string())
        .arg(by);
    let outcome = fence.run_script(script, &call).await?;
    outcome.result.as_integer().ok_or_else(|| {
        FenceError::corrupt(
            "redis",
            domain,
            format!(
                "the credit script answered {:?}, not a balance",
                outcome.result
            ),
        )
    })
}

async fn story() -> Result<(), Error> {
    let fence = connect().await?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let domain = Domain::new(format!("account-7/run-{run}"))?;
    let outcome = fence_examples::until_shutdown(takeover(&fence, &domain)).await;
    // After success, an error or a signal alike: the run's keys go.
    let cleanup = fence_examples::retire_run(&fence, &domain).await;
    fence_examples::after_cleanup(outcome, cleanup)
}

/// Worker 1 credits, stalls past its lease, worker 2 takes over; worker 1's late credit is
/// refused.
async fn takeover(fence: &Observed<RedisFence>, domain: &Domain) -> Result<(), Error> {
    let leases: Arc<dyn LeaseManager> = Arc::new(fence.leases());
    let script = FencedScript::new(CREDIT);
    let clock = Timeline::start();

    // Worker 1's lease is taken by hand and renewed by hand below, so that the story can freeze
    // worker 1 without freezing a renewer; a real worker holds a `LeaseGuard` (worker 2).
    let lease = leases
        .acquire(
            domain,
            &OwnerId::new("worker-1")?,
            Duration::from_millis(300),
        )
        .await?;
    fence.claim(domain, lease.token).await?;
    clock.say("w1", format!("holds the lease with token {}", lease.token));
    let balance = credit(fence, &script, domain, lease.token, 100, "worker-1").await?;
    clock.say(
        "w1",
        format!("credited 100 under the fence: balance {balance}"),
    );

    // The lease is renewed while work goes on...
    let lease = leases.renew(&lease, Duration::from_millis(300)).await?;
    // ...until worker 1 stalls past it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Worker 2's guard waits for worker 1's lease to end, then keeps worker 2's renewed.
    let options = LeaseOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
    let next =
        LeaseGuard::acquire(leases.clone(), domain, &OwnerId::new("worker-2")?, options).await?;
    fence.claim(domain, next.token()).await?;
    clock.say("w2", format!("took over with token {}", next.token()));
    let balance = credit(fence, &script, domain, next.token(), 50, "worker-2").await?;
    clock.say("w2", format!("credited 50: balance {balance}"));

    match credit(fence, &script, domain, lease.token, 100, "worker-1 (stale)").await {
        Err(error) if error.is_fenced() => {
            clock.say("w1", format!("wakes up and retries its credit: {error}"))
        }
        other => return Err(format!("the stale credit was not fenced: {other:?}").into()),
    }
    // Worker 2 audits the balance under its lease (a credit of 0), then releases it.
    let final_balance = credit(fence, &script, domain, next.token(), 0, "audit").await?;
    next.release().await?;
    println!("final balance {final_balance}: the stale worker's credit never ran");
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fence_examples::run_example("redis_worker", USAGE, async {
        fence_examples::no_arguments()?;
        story().await.map(|()| true)
    })
    .await
}
