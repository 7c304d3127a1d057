//! fence-object-store, per object_store backend (InMemory, Azure Blob on the project's Azurite,
//! S3 on the project's SeaweedFS): a steady fenced put against object_store's plain
//! unconditional put and against its plain conditional put (`PutMode::Update` naming the
//! version the previous put returned), 1 KiB, side by side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fence_object_store::env::store_from_url;
use fence_object_store::object_store::path::Path;
use fence_object_store::object_store::{ObjectStore, PutMode, PutOptions, UpdateVersion};
use fence_object_store::ObjectStoreFence;

use crate::fenced::{fenced_puts, written_domains, BoxFuture};
use crate::measure::{compare, run_id, Plan};
use crate::probe::Probe;
use crate::report::Row;

const BACKEND: &str = "object_store";

/// A store measured: a label, the store, and its server's PID file (none in memory).
type Measured = (&'static str, Arc<dyn ObjectStore>, Option<&'static str>);

/// The stores measured.
fn stores() -> Result<Vec<Measured>, String> {
    let pairs = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let s3_endpoint = env("FENCE_S3_ENDPOINT", "http://127.0.0.1:8333");
    let s3_access = env("FENCE_S3_ACCESS_KEY", fence_testkit::s3::ACCESS_KEY);
    let s3_secret = env("FENCE_S3_SECRET_KEY", fence_testkit::s3::SECRET_KEY);
    let s3 = store_from_url(
        &format!("s3://{}", env("FENCE_S3_BUCKET", fence_testkit::s3::BUCKET)),
        pairs(&[
            ("aws_endpoint", &s3_endpoint),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", &s3_access),
            ("aws_secret_access_key", &s3_secret),
            ("aws_region", "us-east-1"),
        ]),
    )
    .map_err(|e| e.to_string())?;
    // The Azurite scripts/services starts.
    use fence_testkit::azurite;
    let azurite_url = azurite::shared_account_url();
    let azure = store_from_url(
        &format!("az://{}", azurite::SHARED_CONTAINER),
        pairs(&[
            ("azure_storage_account_name", azurite::ACCOUNT),
            ("azure_storage_account_key", azurite::ACCOUNT_KEY),
            ("azure_storage_endpoint", &azurite_url),
            ("azure_allow_http", "true"),
        ]),
    )
    .map_err(|e| e.to_string())?;
    Ok(vec![
        (
            "memory",
            Arc::new(fence_object_store::object_store::memory::InMemory::new()),
            None,
        ),
        ("azure (Azurite)", azure, Some("azurite/azurite.pid")),
        ("s3 (SeaweedFS)", s3, Some("seaweedfs/weed.pid")),
    ])
}

pub(crate) async fn run() -> Vec<Row> {
    let stores = match stores() {
        Ok(stores) => stores,
        Err(error) => return vec![Row::note(BACKEND, "all cases", error)],
    };
    let mut rows = Vec::new();
    for (label, store, pid_file) in stores {
        match run_store(label, store, pid_file).await {
            Ok(mut measured) => rows.append(&mut measured),
            Err(error) => rows.push(Row::note(BACKEND, label, error)),
        }
    }
    rows
}

/// Plain puts of `payload` at `<prefix><i % keys>`; `conditional`: each names the version the
/// previous put of its key returned (`PutMode::Update`), the first creates.
fn plain_puts(
    store: &Arc<dyn ObjectStore>,
    prefix: String,
    keys: usize,
    payload: &Bytes,
    conditional: bool,
) -> impl Fn(usize) -> BoxFuture + Send + Sync + 'static {
    let (store, payload) = (store.clone(), payload.clone());
    let versions: Arc<Mutex<HashMap<usize, UpdateVersion>>> = Arc::default();
    move |i| {
        let key = i % keys;
        let (store, payload, versions) = (store.clone(), payload.clone(), versions.clone());
        let path = Path::from(format!("{prefix}{key}"));
        Box::pin(async move {
            let known = versions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .cloned();
            let mode = match (conditional, known) {
                (false, _) => PutMode::Overwrite,
                (true, Some(version)) => PutMode::Update(version),
                (true, None) => PutMode::Create,
            };
            let put = store
                .put_opts(&path, payload.into(), PutOptions::from(mode))
                .await
                .map_err(|e| e.to_string())?;
            versions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, UpdateVersion::from(put));
            Ok(())
        })
    }
}

async fn run_store(
    label: &str,
    store: Arc<dyn ObjectStore>,
    pid_file: Option<&str>,
) -> Result<Vec<Row>, String> {
    let run = run_id();
    let measured = measure(label, &store, pid_file, run).await;
    // What the run wrote goes, whether or not it measured: the fenced objects and the plain.
    let cleaned = fence_object_store::delete_under(&*store, &format!("bench-{run}/")).await;
    let rows = measured?;
    cleaned.map_err(|e| format!("removing the run's objects: {e}"))?;
    Ok(rows)
}

async fn measure(
    label: &str,
    store: &Arc<dyn ObjectStore>,
    pid_file: Option<&str>,
    run: u128,
) -> Result<Vec<Row>, String> {
    let probe = pid_file.map(Probe::server).unwrap_or_default();
    let kib = Bytes::from(vec![b'x'; 1024]);
    let fence = ObjectStoreFence::builder(store.clone())
        .prefix(format!("bench-{run}/fenced/"))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let domains = written_domains(&fence, 8, &kib).await?;
    let plan = Plan {
        rounds: 6,
        batch: 40,
        concurrency: 1,
        group: 1,
    };
    let mut rows = Vec::new();
    for (versus, conditional) in [("plain put", false), ("plain conditional put", true)] {
        let (fenced, plain) = compare(
            plan,
            &probe,
            fenced_puts(&fence, &domains, &kib),
            plain_puts(
                store,
                format!("bench-{run}/plain-{conditional}/"),
                8,
                &kib,
                conditional,
            ),
        )
        .await;
        rows.push(Row::new(
            BACKEND,
            format!("{label}: steady fenced put vs {versus}, 1 KiB"),
            1,
            &fenced,
            &plain,
        ));
    }
    Ok(rows)
}
