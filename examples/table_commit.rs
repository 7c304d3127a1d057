//! A table writer commits a new version of a table on an object store: it writes immutable data
//! files, then commits a manifest naming them through one fenced pointer object, under a lease
//! from the team's coordinator. A writer that stalled past its lease wakes up and commits its
//! own files: the store refuses that commit, so readers never see its version. A plain reader
//! (object_store alone and the published decoders, no fence, no lease) then reads the table.
//!
//! `cargo run --example table_commit` (in memory), or with `--features servers`:
//! `--backend azure` (FENCE_OBJECT_STORE_URL=az://container and object_store's AZURE_*
//! variables; unset, the project's Azurite, which `scripts/services up` starts),
//! `--backend s3` (the FENCE_S3_* variables; else the project's SeaweedFS), `--backend gcs`
//! (FENCE_OBJECT_STORE_URL=gs://bucket and GOOGLE_*; not run by the project's tests: no local
//! emulator accepts object_store's upload).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fence_core::{
    Domain, FenceError, FencedStore, FencingToken, LeaseManager, MemoryLeases, Observed, OwnerId,
    WriteRequest,
};
use fence_examples::Timeline;
use fence_object_store::object_store::path::Path;
use fence_object_store::object_store::{ObjectStore, ObjectStoreExt};
use fence_object_store::{Envelope, Manifest, ObjectStoreFence};

type Error = fence_examples::ExampleError;

const USAGE: &str = "\
table_commit: a table writer commits a new table version (immutable data files + one fenced
manifest pointer) under a lease; a writer that stalled past its lease has its late commit
refused by the object store; a plain reader reads the committed table.

Usage: cargo run [--features servers] --example table_commit -- [--backend memory|azure|s3|gcs]

  memory  object_store's InMemory (the default; no server)
  azure   FENCE_OBJECT_STORE_URL=az://container with object_store's AZURE_* variables
          (unset: the project's Azurite, FENCE_AZURITE_URL or 127.0.0.1:10100, container
          fence-examples)
  s3      s3://FENCE_S3_BUCKET at FENCE_S3_ENDPOINT with FENCE_S3_ACCESS_KEY/SECRET_KEY
          (default the project's SeaweedFS)
  gcs     FENCE_OBJECT_STORE_URL=gs://bucket with object_store's GOOGLE_* variables
          (not tested by the project: no local emulator accepts object_store's upload)";

/// Where the fenced pointer objects live; data files go beside, under `warehouse/`.
const PREFIX: &str = "warehouse/_fence/";

/// The store the chosen backend names.
fn open_store(backend: &str) -> Result<Arc<dyn ObjectStore>, Error> {
    match backend {
        "memory" => Ok(Arc::new(
            fence_object_store::object_store::memory::InMemory::new(),
        )),
        #[cfg(feature = "servers")]
        "azure" | "gcs" | "s3" => servers::open_store(backend),
        #[cfg(not(feature = "servers"))]
        "azure" | "gcs" | "s3" => Err(format!(
            "--backend {backend} needs the servers feature: cargo run --features servers --example table_commit -- --backend {backend}"
        )
        .into()),
        other => Err(format!("unknown backend `{other}`: memory, azure, s3 or gcs").into()),
    }
}

#[cfg(feature = "servers")]
mod servers {
    use std::sync::Arc;

    use fence_core::env::Env;
    use fence_examples::local;
    use fence_object_store::env::{store_from_url, URL};
    use fence_object_store::object_store::ObjectStore;

    use super::Error;

    pub(super) fn open_store(backend: &str) -> Result<Arc<dyn ObjectStore>, Error> {
        let env = Env::process();
        let settings = |pairs: &[(&str, String)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect::<Vec<_>>()
        };
        let scheme = match backend {
            "s3" => {
                use fence_s3::env::{ACCESS_KEY, BUCKET, ENDPOINT, REGION, SECRET_KEY};
                let get = |name, default: &str| env.get(name).unwrap_or_else(|| default.into());
                let endpoint = get(ENDPOINT, local::S3_ENDPOINT);
                let options = settings(&[
                    (
                        "aws_allow_http",
                        endpoint.starts_with("http://").to_string(),
                    ),
                    ("aws_endpoint", endpoint),
                    ("aws_access_key_id", get(ACCESS_KEY, local::S3_ACCESS_KEY)),
                    (
                        "aws_secret_access_key",
                        get(SECRET_KEY, local::S3_SECRET_KEY),
                    ),
                    ("aws_region", get(REGION, "us-east-1")),
                ]);
                let url = format!("s3://{}", get(BUCKET, local::S3_BUCKET));
                return Ok(store_from_url(&url, options)?);
            }
            "azure" => "az://",
            _ => "gs://",
        };
        match env.get(URL) {
            // The user's own store, configured by object_store's own variables.
            Some(url) if url.starts_with(scheme) => {
                let fence = fence_object_store::ObjectStoreFenceBuilder::from_env_with(
                    &Env::from_pairs([(URL, url)]),
                )?
                .build()?;
                Ok(fence.store().clone())
            }
            None if backend == "azure" => {
                let options = settings(&[
                    ("azure_storage_account_name", local::AZURITE_ACCOUNT.into()),
                    (
                        "azure_storage_account_key",
                        local::AZURITE_ACCOUNT_KEY.into(),
                    ),
                    (
                        "azure_storage_endpoint",
                        env.get(local::AZURITE_URL_VARIABLE)
                            .unwrap_or_else(|| local::AZURITE_ACCOUNT_URL.into()),
                    ),
                    ("azure_allow_http", "true".into()),
                ]);
                let url = format!("az://{}", local::AZURITE_CONTAINER);
                Ok(store_from_url(&url, options)?)
            }
            _ => Err(format!("set {URL}={scheme}<bucket or container>").into()),
        }
    }
}

/// One writer's version: its data file (a plain object anyone can read), then its commit.
async fn write_version(
    fence: &Observed<ObjectStoreFence>,
    table: &Domain,
    token: FencingToken,
    rows: &str,
) -> Result<String, FenceError> {
    let key = format!("warehouse/{}/data/part-{token}.csv", table.as_str());
    fence.put_plain(table, &key, rows.to_owned().into()).await?;
    Ok(key)
}

async fn commit(
    fence: &Observed<ObjectStoreFence>,
    table: &Domain,
    token: FencingToken,
    files: &[String],
) -> Result<(), FenceError> {
    let manifest = Manifest::new(files.iter().cloned())?;
    let commit = WriteRequest::put(table.clone(), token, manifest.encode());
    fence.write(&commit).await.map(|_| ())
}

/// What a reader without Fence sees: the pointer object through object_store, decoded with the
/// published envelope and manifest decoders (FORMATS.md), then each data file as written.
async fn plain_read(
    store: &dyn ObjectStore,
    pointer_key: &str,
) -> Result<Vec<(String, String)>, Error> {
    let pointer = store.get(&Path::parse(pointer_key)?).await?.bytes().await?;
    let envelope = Envelope::decode(&pointer)?;
    let manifest = Manifest::parse(&pointer[envelope.payload_offset()..])?;
    let mut files = Vec::new();
    for key in manifest.keys() {
        let bytes = store.get(&Path::parse(key)?).await?.bytes().await?;
        files.push((key.clone(), String::from_utf8_lossy(&bytes).into_owned()));
    }
    Ok(files)
}

async fn story(backend: &str) -> Result<bool, Error> {
    let store = open_store(backend)?;
    // Each writer is its own process with its own client: the stale one has cached nothing
    // of the other's commit, so what refuses it is the pointer object as the store holds it.
    let writer = || {
        ObjectStoreFence::builder(store.clone())
            .prefix(PREFIX)
            .connect()
    };
    let (fence, stale_fence) = (writer().await?, writer().await?);
    // Any coordinator (etcd, ZooKeeper, a Redis lease, Kubernetes): the store enforces the token.
    let coordinator = Observed::new(MemoryLeases::new());
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let table = Domain::new(format!("sales/run-{run}"))?;
    let clock = Timeline::start();
    println!("backend: {backend} ({store}); table `{table}`");

    let first = coordinator
        .acquire(
            &table,
            &OwnerId::new("writer-1")?,
            Duration::from_millis(200),
        )
        .await?;
    let stale_file = write_version(&stale_fence, &table, first.token, "id,amount\n1,100\n").await?;
    let mut files = vec![stale_file.clone()];
    let told = takeover_and_late_commit(
        &Writers {
            fence: &fence,
            stale_fence: &stale_fence,
            store: &*store,
        },
        &coordinator,
        &table,
        (first.token, &stale_file),
        &clock,
        &mut files,
    )
    .await;
    // The run's files, whatever happened: the stale writer's uncommitted file is garbage a
    // table's vacuum would remove; here everything the run created goes.
    for key in &files {
        store.delete(&Path::parse(key)?).await?;
    }
    let told = told?;
    fence_examples::retire_run(&fence, &table).await?;
    Ok(told)
}

/// The two writers' clients over one store.
struct Writers<'a> {
    fence: &'a Observed<ObjectStoreFence>,
    stale_fence: &'a Observed<ObjectStoreFence>,
    store: &'a dyn ObjectStore,
}

/// Writer 2 takes over and commits; writer 1 wakes up and commits late; a plain reader reads.
/// True when the late commit was refused and the reader sees writer 2's file alone.
async fn takeover_and_late_commit(
    writers: &Writers<'_>,
    coordinator: &Observed<MemoryLeases>,
    table: &Domain,
    (stale_token, stale_file): (FencingToken, &String),
    clock: &Timeline,
    files: &mut Vec<String>,
) -> Result<bool, Error> {
    let Writers {
        fence,
        stale_fence,
        store,
    } = *writers;
    clock.say(
        "w1",
        format!("wrote {stale_file} with token {stale_token}, then stalls"),
    );
    tokio::time::sleep(Duration::from_millis(250)).await; // writer 1 stalls past its lease
    let second = coordinator
        .acquire(table, &OwnerId::new("writer-2")?, Duration::from_secs(10))
        .await?;
    let file = write_version(fence, table, second.token, "id,amount\n1,100\n2,250\n").await?;
    files.push(file.clone());
    commit(fence, table, second.token, std::slice::from_ref(&file)).await?;
    clock.say(
        "w2",
        format!("took over and committed {file} with token {}", second.token),
    );

    // Through writer 1's own client, which never saw writer 2's commit: the pointer object as
    // the store holds it decides.
    let late = commit(
        stale_fence,
        table,
        stale_token,
        std::slice::from_ref(stale_file),
    );
    let refused = match late.await {
        Err(error) if error.is_fenced() => {
            clock.say("w1", format!("wakes up and commits: {error}"));
            true
        }
        Ok(()) => false,
        Err(error) => return Err(error.into()),
    };

    let pointer_key = fence.object_key(table)?;
    let read = plain_read(store, &pointer_key).await?;
    println!("a plain reader (object_store, no fence) reads the table at {pointer_key}:");
    for (key, rows) in &read {
        println!("  {key}: {}", rows.trim_end().replace('\n', " | "));
    }
    Ok(refused && read.len() == 1 && read[0].0 == file)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fence_examples::run_example("table_commit", USAGE, async {
        story(&fence_examples::backend_arg("memory")?).await
    })
    .await
}
