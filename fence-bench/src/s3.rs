//! S3 (SeaweedFS): steady and cold fenced PUT vs plain PUT, with requests per write counted, and
//! SeaweedFS's own cost of `If-Match` apart from the adapter's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use fence_core::Observed;
use fence_s3::aws_sdk_s3::primitives::ByteStream;
use fence_s3::aws_sdk_s3::Client;
use fence_s3::S3Fence;
use fence_testkit::s3::RequestCounter;

use crate::fenced::{fenced_puts, written_domains, BoxFuture};
use crate::measure::{compare, run_id, Plan, CONCURRENCY};
use crate::probe::Probe;
use crate::report::Row;

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn client(requests: Option<RequestCounter>) -> Client {
    let mut config = fence_testkit::s3::config(
        &env("FENCE_S3_ENDPOINT", "http://127.0.0.1:8333"),
        &env("FENCE_S3_ACCESS_KEY", fence_testkit::s3::ACCESS_KEY),
        &env("FENCE_S3_SECRET_KEY", fence_testkit::s3::SECRET_KEY),
    );
    if let Some(requests) = requests {
        config = config.interceptor(requests);
    }
    Client::from_conf(config.build())
}

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::note("s3", "all cases", error)],
    }
}

/// The server's CPU: `weed mini`, as `scripts/services` started it.
const PID_FILE: &str = "seaweedfs/weed.pid";

/// A fence under `prefix` with its requests counted; `cold` turns the ETag cache off.
async fn fence(
    bucket: &str,
    prefix: String,
    cold: bool,
) -> Result<(Observed<S3Fence>, RequestCounter), String> {
    let requests = RequestCounter::default();
    let mut builder = S3Fence::builder()
        .client(client(Some(requests.clone())))
        .bucket(bucket)
        .prefix(prefix);
    if cold {
        builder = builder.cache_capacity(0);
    }
    let fence = builder.connect().await.map_err(|e| e.to_string())?;
    Ok((fence, requests))
}

/// Plain PUTs of `payload` at `<prefix><i % keys>`; with `if_match`, each carries the ETag the
/// previous PUT of its key returned (SeaweedFS's own cost of the condition).
fn plain_puts(
    client: &Client,
    bucket: &str,
    prefix: String,
    keys: usize,
    payload: &Bytes,
    if_match: bool,
) -> impl Fn(usize) -> BoxFuture + Send + Sync + 'static {
    let (client, bucket, payload) = (client.clone(), bucket.to_owned(), payload.clone());
    let etags: Arc<Mutex<HashMap<usize, String>>> = Arc::default();
    move |i| {
        let key = i % keys;
        let mut put = client
            .put_object()
            .bucket(&bucket)
            .key(format!("{prefix}{key}"))
            .body(ByteStream::from(payload.clone()));
        let etags = etags.clone();
        if if_match {
            if let Some(etag) = etags.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
                put = put.if_match(etag);
            }
        }
        Box::pin(async move {
            let output = put.send().await.map_err(|e| format!("{e:?}"))?;
            if let Some(etag) = output.e_tag() {
                etags
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, etag.to_owned());
            }
            Ok(())
        })
    }
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let bucket = env("FENCE_S3_BUCKET", "fence-test");
    let run = run_id();
    let plain = client(None);
    let probe = Probe::server(PID_FILE);
    let mut rows = Vec::new();
    let kib = Bytes::from(vec![b'x'; 1024]);
    let mib = Bytes::from(vec![b'x'; 1 << 20]);

    // Steady state at every concurrency: each task writes domains of its own (no lost races).
    for concurrency in CONCURRENCY {
        let keys = concurrency.max(8);
        let (fence, requests) =
            fence(&bucket, format!("bench-{run}/steady-{concurrency}/"), false).await?;
        let domains = written_domains(&fence, keys, &kib).await?;
        requests.take();
        let plan = Plan {
            rounds: 6,
            batch: (4 * concurrency).max(40),
            concurrency,
            group: 1,
        };
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            fenced_puts(&fence, &domains, &kib),
            plain_puts(
                &plain,
                &bucket,
                format!("bench-{run}/plain-{concurrency}/"),
                keys,
                &kib,
                false,
            ),
        )
        .await;
        let mut row = Row::new(
            "s3",
            "steady fenced PUT vs plain PUT, 1 KiB",
            concurrency,
            &fenced,
            &unfenced,
        );
        row.requests_per_write =
            Some(requests.take() as f64 / ((plan.rounds + 1) * plan.batch) as f64);
        rows.push(row);
    }

    // Where the steady-state difference comes from, at concurrency 1: SeaweedFS's own cost of
    // `If-Match`, then the adapter's (fenced PUT vs the same conditional plain PUT).
    let plan = Plan {
        rounds: 6,
        batch: 40,
        concurrency: 1,
        group: 1,
    };
    let (with, without) = compare(
        plan,
        &probe,
        plain_puts(
            &plain,
            &bucket,
            format!("bench-{run}/if-match/"),
            8,
            &kib,
            true,
        ),
        plain_puts(
            &plain,
            &bucket,
            format!("bench-{run}/no-if-match/"),
            8,
            &kib,
            false,
        ),
    )
    .await;
    rows.push(Row::new(
        "s3",
        "plain PUT with If-Match vs without, 1 KiB",
        1,
        &with,
        &without,
    ));
    let (fence_1, _) = fence(&bucket, format!("bench-{run}/vs-if-match/"), false).await?;
    let domains = written_domains(&fence_1, 8, &kib).await?;
    let (fenced, conditional) = compare(
        plan,
        &probe,
        fenced_puts(&fence_1, &domains, &kib),
        plain_puts(
            &plain,
            &bucket,
            format!("bench-{run}/if-match-2/"),
            8,
            &kib,
            true,
        ),
    )
    .await;
    rows.push(Row::new(
        "s3",
        "steady fenced PUT vs plain PUT with If-Match, 1 KiB",
        1,
        &fenced,
        &conditional,
    ));

    // Cold (no cache: read, then the conditional PUT), and 1 MiB, at concurrency 1.
    for (label, payload, rounds, batch, cold) in [
        (
            "cold (no cache) fenced PUT vs plain PUT, 1 KiB",
            &kib,
            6,
            40,
            true,
        ),
        ("steady fenced PUT vs plain PUT, 1 MiB", &mib, 4, 8, false),
        (
            "cold (no cache) fenced PUT vs plain PUT, 1 MiB",
            &mib,
            4,
            8,
            true,
        ),
    ] {
        let (fence, requests) = fence(&bucket, format!("bench-{run}/{label}/"), cold).await?;
        let domains = written_domains(&fence, 8, payload).await?;
        requests.take();
        let plan = Plan {
            rounds,
            batch,
            concurrency: 1,
            group: 1,
        };
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            fenced_puts(&fence, &domains, payload),
            plain_puts(
                &plain,
                &bucket,
                format!("bench-{run}/plain/{label}/"),
                8,
                payload,
                false,
            ),
        )
        .await;
        let mut row = Row::new("s3", label, 1, &fenced, &unfenced);
        row.requests_per_write = Some(requests.take() as f64 / ((rounds + 1) * batch) as f64);
        rows.push(row);
    }
    rows.push(Row::note(
        "s3",
        "ETag cache bound",
        format!("{} objects by default (cache_capacity), oldest evicted first; an entry is the ETag plus the parsed envelope header (~100 bytes + remembered op ids)", fence_s3::DEFAULT_CACHE_CAPACITY),
    ));
    Ok(rows)
}
