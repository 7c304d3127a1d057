//! S3 (SeaweedFS): steady and cold fenced PUT vs plain PUT, with requests per write counted.

use bytes::Bytes;
use std::sync::Arc;

use fence_core::{Domain, FencedStore, FencingToken, WriteRequest};
use fence_s3::aws_sdk_s3::primitives::ByteStream;
use fence_s3::aws_sdk_s3::Client;
use fence_s3::S3Fence;
use fence_testkit::s3::RequestCounter;

use crate::measure::{compare, Plan};
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
        Err(error) => vec![Row::skipped("s3", "all cases", error)],
    }
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let bucket = env("FENCE_S3_BUCKET", "fence-test");
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_millis();
    let plain = client(None);
    let mut rows = Vec::new();
    for (label, size, rounds, batch) in [("1 KiB", 1024usize, 6, 40), ("1 MiB", 1 << 20, 4, 8)] {
        for cold in [false, true] {
            let requests = RequestCounter::default();
            let mut builder = S3Fence::builder()
                .client(client(Some(requests.clone())))
                .bucket(&bucket)
                .prefix(format!("bench-{run}/{label}/{cold}/"));
            if cold {
                builder = builder.cache_capacity(0);
            }
            let fence = builder.connect().await.map_err(|e| e.to_string())?;
            let payload = Bytes::from(vec![b'x'; size]);
            let domains: Arc<Vec<Domain>> = Arc::new(
                (0..8)
                    .map(|i| Domain::new(format!("d{i}")))
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?,
            );
            // Create every object first, so the first write's read of a missing key is not counted.
            for domain in domains.iter() {
                fence
                    .write(&WriteRequest::put(
                        domain.clone(),
                        FencingToken::MIN,
                        payload.clone(),
                    ))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            requests.take();
            let plan = Plan {
                rounds,
                batch,
                concurrency: 1,
                group: 1,
            };
            let (f, d, p) = (fence.clone(), domains.clone(), payload.clone());
            let (c, b, p2, prefix) = (
                plain.clone(),
                bucket.clone(),
                payload.clone(),
                format!("bench-{run}/plain/{label}/"),
            );
            let (fenced, unfenced) = compare(
                plan,
                move |i| {
                    let (fence, request) = (
                        f.clone(),
                        WriteRequest::put(d[i % d.len()].clone(), FencingToken::MIN, p.clone()),
                    );
                    async move {
                        fence
                            .write(&request)
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }
                },
                move |i| {
                    let put = c
                        .put_object()
                        .bucket(&b)
                        .key(format!("{prefix}{}", i % 8))
                        .body(ByteStream::from(p2.clone()));
                    async move { put.send().await.map(|_| ()).map_err(|e| e.to_string()) }
                },
            )
            .await;
            let writes = (plan.rounds + 1) * plan.batch;
            let mut row = Row::new(
                "s3",
                format!(
                    "{} fenced PUT vs plain PUT, {label}",
                    if cold { "cold (no cache)" } else { "steady" }
                ),
                &fenced,
                &unfenced,
            );
            row.requests_per_write = Some(requests.take() as f64 / writes as f64);
            rows.push(row);
        }
    }
    rows.push(Row::skipped(
        "s3",
        "ETag cache bound",
        format!("{} objects by default (cache_capacity), oldest evicted first; an entry is the ETag plus the parsed envelope header (~100 bytes + remembered op ids)", fence_s3::DEFAULT_CACHE_CAPACITY),
    ));
    Ok(rows)
}
