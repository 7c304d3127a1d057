//! The stale-writer story: worker A holds a lease, pauses past its expiry, and wakes up to write
//! after worker B took over. The resource rejects A's write because B's token is newer.
//!
//! `cargo run --example stale_writer` (memory, embedded: nothing else is compiled), or
//! `cargo run --features servers --example stale_writer -- --backend redis|s3|kafka|postgres|mysql`

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fence_core::{Domain, FenceError, LeaseGuard, LeaseManager, LeaseOptions, OwnerId};
use fence_examples::{run_example, Backend, Resource, Timeline};
use tokio::sync::oneshot;

const USAGE: &str = "\
stale_writer: worker A holds a lease, pauses past its expiry and wakes up to write after worker
B took over; the resource rejects A's write because B's token is newer.

Usage: cargo run [--features servers] --example stale_writer [-- --backend NAME] [--keep]
  --backend NAME   where the fenced value lives: memory (the default: embedded, no servers),
                   or with --features servers: redis, s3, kafka, postgres
  --keep           keep the run's domain (to look at it with `fence inspect`); by default the
                   run removes what it created";

const LEASE: Duration = Duration::from_millis(200);
const PAUSE: Duration = Duration::from_millis(450);
const B_VALUE: &str = "total=120 (by B)";

type Error = Box<dyn std::error::Error + Send + Sync>;

fn describe(result: &Result<String, FenceError>) -> String {
    match result {
        Ok(outcome) => outcome.clone(),
        Err(error) if error.is_fenced() => format!("REJECTED: {error}"),
        Err(error) => format!("failed: {error}"),
    }
}

/// Worker A: acquires, writes, pauses past its lease, then writes again as if nothing happened.
async fn worker_a(
    resource: Resource,
    leases: Arc<dyn LeaseManager>,
    domain: Domain,
    clock: Timeline,
    acquired: oneshot::Sender<()>,
    b_claimed: oneshot::Receiver<()>,
) -> Result<Result<String, FenceError>, Error> {
    let lease = leases
        .acquire(&domain, &OwnerId::new("worker-a")?, LEASE)
        .await?;
    clock.say(
        "A",
        format!(
            "acquired the lease ({}ms) with fencing token {}",
            LEASE.as_millis(),
            lease.token
        ),
    );
    let first = resource
        .write(&domain, lease.token, "total=100 (by A)")
        .await;
    clock.say(
        "A",
        format!("wrote \"total=100 (by A)\" -> {}", describe(&first)),
    );
    first?;
    // B moves only once A's first write landed (on Kafka the first append also initialises a
    // transactional producer, which can take longer than A's short lease).
    let _ = acquired.send(());
    clock.say(
        "A",
        format!(
            "pauses (GC, scheduler, network) for {}ms or more, past its lease",
            PAUSE.as_millis()
        ),
    );
    tokio::time::sleep(PAUSE).await;
    // The pause outlasts B's takeover even when a slow backend stretches B's claim (a
    // Kafka claim initialises a transactional producer): the story is about what happens
    // after the resource has seen the newer token. If B failed, A goes on anyway.
    let _ = b_claimed.await;
    clock.say(
        "A",
        "resumes, unaware that its lease expired, and writes again",
    );
    let stale = resource
        .write(&domain, lease.token, "total=100 (by A, stale)")
        .await;
    clock.say(
        "A",
        format!("wrote \"total=100 (by A, stale)\" -> {}", describe(&stale)),
    );
    Ok(stale)
}

/// Worker B: waits for A's lease to expire, acquires, claims, writes.
async fn worker_b(
    resource: Resource,
    leases: Arc<dyn LeaseManager>,
    domain: Domain,
    clock: Timeline,
    a_acquired: oneshot::Receiver<()>,
    claimed_signal: oneshot::Sender<()>,
) -> Result<(), Error> {
    // The story starts with A holding the lease and having written once.
    a_acquired.await?;
    // The guard waits for A's lease to end (up to 10 s), then keeps B's renewed.
    clock.say("B", "waits for the lease (held by A) for up to 10 s");
    let options = LeaseOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(10));
    let guard = LeaseGuard::acquire(leases, &domain, &OwnerId::new("worker-b")?, options).await?;
    let lease = guard.lease();
    clock.say(
        "B",
        format!("acquired the lease with fencing token {}", lease.token),
    );
    let claimed = resource.fence().claim(&domain, lease.token).await?;
    let before = claimed
        .previous_high_water_mark
        .map_or("none".into(), |t| t.to_string());
    clock.say(
        "B",
        format!(
            "claimed the domain: high-water mark {before} -> {}",
            claimed.token
        ),
    );
    let _ = claimed_signal.send(());
    let write = resource.write(&domain, lease.token, B_VALUE).await;
    clock.say("B", format!("wrote \"{B_VALUE}\" -> {}", describe(&write)));
    write?;
    guard.release().await?;
    Ok(())
}

async fn run() -> Result<bool, Error> {
    let (keep, args): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|arg| arg == "--keep");
    let backend = Backend::from_args(args)?;
    let opened = backend.open().await.map_err(|e| e.to_string())?;
    // A fresh domain per run, so a shared server never sees a previous run's mark.
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let domain = Domain::new(format!("invoice-42/run-{run_id}"))?;
    println!("Fence demo: a paused worker wakes up after its lease expired");
    println!("backend: {}; domain `{domain}`", opened.description);
    let clock = Timeline::start();
    let (acquired, a_acquired) = oneshot::channel();
    let (claimed_signal, b_claimed) = oneshot::channel();
    let a = tokio::spawn(worker_a(
        opened.resource.clone(),
        opened.leases.clone(),
        domain.clone(),
        clock,
        acquired,
        b_claimed,
    ));
    let b = tokio::spawn(worker_b(
        opened.resource.clone(),
        opened.leases.clone(),
        domain.clone(),
        clock,
        a_acquired,
        claimed_signal,
    ));
    b.await??;
    let stale = a.await??;
    let (latest, summary) = opened.resource.summary(&domain).await?;
    println!("{summary}");
    if keep.is_empty() {
        opened.finish(&domain).await?;
    }
    Ok(stale.is_err_and(|e| e.is_fenced()) && latest.as_deref() == Some(B_VALUE))
}

#[tokio::main]
async fn main() -> ExitCode {
    run_example("stale_writer", USAGE, async {
        let rejected = run().await?;
        if rejected {
            println!("the stale write was rejected by the resource: B's data is intact");
        }
        Ok(rejected)
    })
    .await
}
