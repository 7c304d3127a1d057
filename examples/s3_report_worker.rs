//! A worker that rewrites a report object under its lease. The report is the fenced manifest;
//! its sections are immutable data objects it points at (the commit-pointer pattern), so a
//! stalled worker can neither overwrite the report nor make it point at its stale sections.
//!
//! `cargo run --features servers --example s3_report_worker` (S3 at `FENCE_S3_ENDPOINT`, `FENCE_S3_BUCKET`,
//! `FENCE_S3_ACCESS_KEY`, `FENCE_S3_SECRET_KEY`, else the project's SeaweedFS:
//! `scripts/services up`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fence_core::{
    Domain, Fence, FencedStore, FencingToken, LeaseManager, MemoryLeases, Observed, OwnerId,
    WriteRequest,
};
use fence_examples::{s3_fence, Timeline};
use fence_s3::S3Fence;

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
s3_report_worker: a worker rewrites a report (a fenced manifest pointing at immutable
section objects) under its lease; a stalled worker can neither overwrite the report nor point
it at its stale sections.

Usage: cargo run --features servers --example s3_report_worker";

/// Writes the sections as immutable objects, then points the report at them.
async fn publish(
    fence: &Observed<S3Fence>,
    report: &Domain,
    token: FencingToken,
    author: &str,
) -> Result<(), fence_core::FenceError> {
    let mut names = Vec::new();
    for section in ["summary", "figures"] {
        let name = format!("{section}-{token}");
        fence
            .put_immutable(report, &name, format!("{section} by {author}").into())
            .await?;
        names.push(name);
    }
    fence
        .write(&WriteRequest::put(report.clone(), token, names.join("\n")))
        .await?;
    Ok(())
}

async fn story() -> Result<(), Error> {
    let fence = s3_fence().await?;
    let leases = Observed::new(MemoryLeases::new()); // any lease service: the object enforces the token
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let report = Domain::new(format!("reports/2026-q3/run-{run}"))?;
    let clock = Timeline::start();

    let first = leases
        .acquire(
            &report,
            &OwnerId::new("worker-1")?,
            Duration::from_millis(200),
        )
        .await?;
    fence.claim(&report, first.token).await?;
    publish(&fence, &report, first.token, "worker-1").await?;
    clock.say(
        "w1",
        format!("published the report with token {}", first.token),
    );

    tokio::time::sleep(Duration::from_millis(250)).await; // worker 1 stalls past its lease
    let second = leases
        .acquire(&report, &OwnerId::new("worker-2")?, Duration::from_secs(10))
        .await?;
    fence.claim(&report, second.token).await?;
    publish(&fence, &report, second.token, "worker-2").await?;
    clock.say(
        "w2",
        format!("took over and republished with token {}", second.token),
    );

    match publish(&fence, &report, first.token, "worker-1 (stale)").await {
        Err(error) if error.is_fenced() => {
            clock.say("w1", format!("wakes up and republishes: {error}"))
        }
        other => return Err(format!("the stale publish was not fenced: {other:?}").into()),
    }
    let manifest = fence.read(&report).await?;
    let text = manifest
        .value()
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default();
    println!("report points at: {}", text.replace('\n', ", "));
    for name in text.lines() {
        let section = fence
            .get_immutable(&report, name)
            .await?
            .unwrap_or_default();
        println!("  {name}: {}", String::from_utf8_lossy(&section));
    }
    fence_examples::retire_run(&fence, &report).await
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fence_examples::run_example("s3_report_worker", USAGE, async {
        fence_examples::no_arguments()?;
        story().await.map(|()| true)
    })
    .await
}
