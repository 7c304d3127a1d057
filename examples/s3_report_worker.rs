//! A worker that rewrites a report object under its lease. The report is the fenced manifest;
//! its sections are immutable data objects it points at (the commit-pointer pattern), so a
//! stalled worker can neither overwrite the report nor make it point at its stale sections.
//!
//! `cargo run --features servers --example s3_report_worker` (S3 at `FENCE_S3_ENDPOINT`, `FENCE_S3_BUCKET`,
//! `FENCE_S3_ACCESS_KEY`, `FENCE_S3_SECRET_KEY`, else the project's SeaweedFS:
//! `scripts/services up`). Ctrl-c or SIGTERM stops the story; the run's objects are removed in
//! every case.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fence_core::{
    Domain, Fence, FencedStore, FencingToken, LeaseGuard, LeaseManager, LeaseOptions, MemoryLeases,
    Observed, OwnerId, WriteRequest,
};
use fence_examples::{local, Timeline, Unreachable};
use fence_s3::aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use fence_s3::aws_sdk_s3::{Client, Config};
use fence_s3::S3Fence;

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
s3_report_worker: a worker rewrites a report (a fenced manifest pointing at immutable
section objects) under its lease; a stalled worker can neither overwrite the report nor point
it at its stale sections.

Usage: cargo run --features servers --example s3_report_worker";

/// The worker's bucket: `FENCE_S3_BUCKET` on the S3-compatible server at `FENCE_S3_ENDPOINT`
/// (path-style) with the keys in `FENCE_S3_ACCESS_KEY` and `FENCE_S3_SECRET_KEY`, else the
/// project's SeaweedFS and its test keys. On AWS, give `.sdk_config(..)` the configuration
/// of `aws_config::load_defaults` instead (an IAM role works); `S3FenceBuilder::from_env()`
/// reads every `FENCE_S3_*` variable.
async fn connect() -> Result<Observed<S3Fence>, Error> {
    // The project's server and its test keys only when no endpoint is named: never its keys
    // on your server.
    let on_local_server = std::env::var("FENCE_S3_ENDPOINT").is_err();
    let setting = |name: &str, local: &str| match std::env::var(name) {
        Ok(value) => Ok(value),
        Err(_) if on_local_server => Ok(local.to_owned()),
        Err(_) => Err(format!(
            "{name} is not set (FENCE_S3_ENDPOINT names your server)"
        )),
    };
    let endpoint = setting("FENCE_S3_ENDPOINT", local::S3_ENDPOINT)?;
    let bucket = setting("FENCE_S3_BUCKET", local::S3_BUCKET)?;
    let credentials = Credentials::new(
        setting("FENCE_S3_ACCESS_KEY", local::S3_ACCESS_KEY)?,
        setting("FENCE_S3_SECRET_KEY", local::S3_SECRET_KEY)?,
        None,
        None,
        "s3_report_worker",
    );
    let config = Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .force_path_style(true)
        // S3-compatible servers ignore the region; AWS needs the bucket's.
        .region(Region::new(
            std::env::var("FENCE_S3_REGION").unwrap_or_else(|_| "us-east-1".to_owned()),
        ))
        .credentials_provider(credentials)
        .build();
    // `connect` probes the bucket for the conditional writes the fence relies on.
    let fence = S3Fence::builder()
        .client(Client::from_conf(config))
        .bucket(&bucket)
        .connect()
        .await
        .map_err(|e| {
            Unreachable::new(
                "S3",
                &format!("{endpoint} (bucket {bucket})"),
                "FENCE_S3_ENDPOINT",
                e,
            )
        })?;
    Ok(fence)
}

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
    let fence = connect().await?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let report = Domain::new(format!("reports/2026-q3/run-{run}"))?;
    let outcome = fence_examples::until_shutdown(takeover(&fence, &report)).await;
    // After success, an error or a signal alike: the run's objects go.
    let cleanup = fence_examples::retire_run(&fence, &report).await;
    fence_examples::after_cleanup(outcome, cleanup)
}

/// Worker 1 publishes, stalls past its lease, worker 2 takes over and republishes; worker 1's
/// late publish is refused.
async fn takeover(fence: &Observed<S3Fence>, report: &Domain) -> Result<(), Error> {
    // Any lease service: the object enforces the token.
    let leases: Arc<dyn LeaseManager> = Arc::new(Observed::new(MemoryLeases::new()));
    let clock = Timeline::start();

    // Worker 1's lease is taken by hand, so that the story can freeze worker 1 without freezing
    // a renewer; a real worker holds a `LeaseGuard` (worker 2).
    let first = leases
        .acquire(
            report,
            &OwnerId::new("worker-1")?,
            Duration::from_millis(200),
        )
        .await?;
    fence.claim(report, first.token).await?;
    publish(fence, report, first.token, "worker-1").await?;
    clock.say(
        "w1",
        format!("published the report with token {}", first.token),
    );

    tokio::time::sleep(Duration::from_millis(250)).await; // worker 1 stalls past its lease
    let options = LeaseOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(5));
    let second =
        LeaseGuard::acquire(leases.clone(), report, &OwnerId::new("worker-2")?, options).await?;
    fence.claim(report, second.token()).await?;
    publish(fence, report, second.token(), "worker-2").await?;
    clock.say(
        "w2",
        format!("took over and republished with token {}", second.token()),
    );

    match publish(fence, report, first.token, "worker-1 (stale)").await {
        Err(error) if error.is_fenced() => {
            clock.say("w1", format!("wakes up and republishes: {error}"))
        }
        other => return Err(format!("the stale publish was not fenced: {other:?}").into()),
    }
    let manifest = fence.read(report).await?;
    let text = manifest
        .value()
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .ok_or("the report has no value after worker 2's publish")?;
    println!("report points at: {}", text.replace('\n', ", "));
    for name in text.lines() {
        let section = fence
            .get_immutable(report, name)
            .await?
            .ok_or_else(|| format!("the report points at `{name}`, which is missing"))?;
        println!("  {name}: {}", String::from_utf8_lossy(&section));
    }
    second.release().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fence_examples::run_example("s3_report_worker", USAGE, async {
        fence_examples::no_arguments()?;
        story().await.map(|()| true)
    })
    .await
}
