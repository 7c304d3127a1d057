//! S3: the shared SeaweedFS that `scripts/test` starts, dedicated `weed mini`
//! processes a test owns (to kill, pause and restart), a request counter, and a scripted fake
//! endpoint for status codes real servers cannot be made to answer on demand.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RuntimeComponents,
};
use fence_core::Observed;
use fence_s3::S3Fence;

use crate::process::ManagedProcess;

pub mod scripted;

/// The access key of the test servers.
pub const ACCESS_KEY: &str = "fence-test-access";
/// The secret key of the test servers.
pub const SECRET_KEY: &str = "fence-test-secret";
/// The bucket the test servers hold.
pub const BUCKET: &str = "fence-test";

use crate::unavailable;

/// Counts every HTTP request the client sends.
#[derive(Clone, Debug, Default)]
pub struct RequestCounter(Arc<AtomicUsize>);

impl RequestCounter {
    /// The requests counted since the last call, resetting the count.
    pub fn take(&self) -> usize {
        self.0.swap(0, Ordering::SeqCst)
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_s3::error::BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A client config for `endpoint` with the test credentials.
pub fn config(endpoint: &str, access: &str, secret: &str) -> aws_sdk_s3::config::Builder {
    aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(Credentials::new(access, secret, None, None, "fence-tests"))
}

/// A client of `endpoint` with the test credentials.
pub fn client(endpoint: &str) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(config(endpoint, ACCESS_KEY, SECRET_KEY).build())
}

/// The raw bytes of object `key` in the test bucket, read with `client` (no Fence involved).
pub async fn raw_get(client: &aws_sdk_s3::Client, key: &str) -> Vec<u8> {
    let object = client
        .get_object()
        .bucket(BUCKET)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET `{key}`: {e}"));
    let body = object.body.collect().await;
    body.unwrap_or_else(|e| panic!("GET `{key}`: {e}"))
        .into_bytes()
        .to_vec()
}

/// Writes `body` as object `key` in the test bucket with `client`, unconditionally (no Fence
/// involved).
pub async fn raw_put(client: &aws_sdk_s3::Client, key: &str, body: Vec<u8>) {
    client
        .put_object()
        .bucket(BUCKET)
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from(body))
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT `{key}`: {e}"));
}

/// A unique key prefix per test run.
pub fn unique_prefix(test: &str) -> String {
    format!("fence-test/{test}/{}/", crate::unique_suffix())
}

fn listens(port: u16) -> bool {
    crate::listens(&format!("127.0.0.1:{port}"))
}

/// The shared SeaweedFS endpoint, if it listens.
pub fn shared_endpoint() -> Option<String> {
    let endpoint =
        std::env::var("FENCE_S3_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8333".into());
    let port = endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or(8333);
    if crate::shared_server_answers(&endpoint, || listens(port)) {
        Some(endpoint)
    } else {
        unavailable(&format!("the shared SeaweedFS S3 endpoint at {endpoint}"))
            .map(|_| String::new())
    }
}

/// A client of `endpoint` that counts every request it sends.
pub fn counted_client(endpoint: &str) -> (aws_sdk_s3::Client, RequestCounter) {
    let counter = RequestCounter::default();
    let client = aws_sdk_s3::Client::from_conf(
        config(endpoint, ACCESS_KEY, SECRET_KEY)
            .interceptor(counter.clone())
            .build(),
    );
    (client, counter)
}

/// Connects `builder` (the probe runs) under a unique prefix, writes one domain and reads it
/// back: a fence configured some other way works against the server.
pub async fn write_and_read_back(builder: fence_s3::S3FenceBuilder) {
    use fence_conformance::services::{domain, put, value_of};
    let fence = builder
        .prefix(unique_prefix("configured"))
        .connect()
        .await
        .expect("the probe passes");
    let configured = domain("configured");
    put(&fence, &configured, 3, "from the environment")
        .await
        .expect("write");
    assert_eq!(
        value_of(&fence, &configured).await.as_deref(),
        Some("from the environment")
    );
}

/// A fence on the shared server with a unique prefix, counting requests.
pub async fn shared_fence(test: &str) -> Option<(Observed<S3Fence>, RequestCounter)> {
    let endpoint = shared_endpoint()?;
    let (client, counter) = counted_client(&endpoint);
    let fence = S3Fence::builder()
        .client(client)
        .bucket(BUCKET)
        .prefix(unique_prefix(test))
        .connect()
        .await
        .expect("probe the shared SeaweedFS");
    counter.take();
    Some((fence, counter))
}

/// Another process's fence on the shared server, under `fence`'s prefix: its own client
/// (counting its requests) and nothing cached, so a refusal it gets is decided on what
/// SeaweedFS holds (its read of the object, or a conditional PUT answered 412), never on what
/// `fence` saw.
pub fn another_process(fence: &Observed<S3Fence>) -> (Observed<S3Fence>, RequestCounter) {
    let endpoint = shared_endpoint().expect("the shared SeaweedFS this fence runs on");
    let (client, counter) = counted_client(&endpoint);
    let fresh = S3Fence::builder()
        .client(client)
        .bucket(BUCKET)
        .prefix(fence.prefix())
        .build()
        .expect("the same configuration as a working fence");
    (fresh, counter)
}

fn weed_binary() -> Option<PathBuf> {
    let path = std::env::var("FENCE_WEED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| crate::services_dir().join("seaweedfs-venv/bin/weed"));
    path.exists().then_some(path)
}

/// Four base ports whose gRPC twins (+10000) are free too.
fn free_ports() -> [u16; 4] {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let pick = 20_000
            + ((u64::from(std::process::id()) * 97 + NEXT.fetch_add(7, Ordering::Relaxed) * 13)
                % 9_000) as u16;
        let ports = [pick, pick + 1, pick + 2, pick + 3];
        let free = ports.iter().all(|&p| {
            TcpListener::bind(("127.0.0.1", p)).is_ok()
                && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok()
        });
        if free {
            return ports;
        }
    }
}

/// The object a starting `weed mini` is written to before it counts as ready (outside every
/// test's prefix).
const READY_PROBE_KEY: &str = "fence-testkit/ready";

/// The size of the readiness probe as read back, if it can be.
async fn read_back(client: &aws_sdk_s3::Client) -> Option<usize> {
    let object = client
        .get_object()
        .bucket(BUCKET)
        .key(READY_PROBE_KEY)
        .send()
        .await
        .ok()?;
    Some(object.body.collect().await.ok()?.into_bytes().len())
}

/// s3rver, an S3 emulator that ignores conditional headers, on a port of its own with the test
/// bucket: what a fence's capability probe must refuse. Killed when dropped.
pub struct S3rver {
    child: std::process::Child,
    endpoint: String,
}

impl S3rver {
    /// Starts s3rver (`FENCE_S3RVER_BIN`, which scripts/test sets); `None` (loud skip) without it.
    pub fn start() -> Option<Self> {
        let binary = std::env::var("FENCE_S3RVER_BIN").map(PathBuf::from);
        let Some(binary) = binary.ok().filter(|b| b.exists()) else {
            unavailable("s3rver (set FENCE_S3RVER_BIN or run scripts/test)")?;
            return None;
        };
        let port = crate::free_port();
        let dir = crate::data_root("s3rver-tests").join(crate::unique_suffix());
        std::fs::create_dir_all(&dir).expect("s3rver data dir");
        let child = Command::new(binary)
            .args(["-d"])
            .arg(&dir)
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["--configure-bucket", BUCKET])
            .args(["--allow-mismatched-signatures", "--silent"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3rver");
        let server = S3rver {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let address = format!("127.0.0.1:{port}");
        for _ in 0..100 {
            if crate::listens(&address) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(crate::listens(&address), "s3rver never listened");
        Some(server)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl Drop for S3rver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `weed mini` owned by the test (its own ports and data dir), stopped when dropped.
pub struct WeedServer {
    binary: PathBuf,
    ports: [u16; 4],
    process: ManagedProcess,
    /// SeaweedFS's identities file (`-s3.config`), when the test gives one.
    identities: Option<String>,
}

impl WeedServer {
    /// Starts `weed mini` on free ports with the test bucket; `None` (loud skip) without weed.
    ///
    /// Free ports, confirmed once the server answers: if another process took the S3 port in
    /// between, ours exits (or never owns the socket) and other ports are tried.
    pub async fn start(name: &str) -> Option<Self> {
        Self::start_with(name, None).await
    }

    /// [`WeedServer::start`] with more identities beside the test's own keys (which keep every
    /// action): `(access key, secret key, actions)`, the actions SeaweedFS knows (`Read`,
    /// `Write`, `List`, `Tagging`, `Admin`).
    pub async fn start_with_identities(
        name: &str,
        identities: &[(&str, &str, &[&str])],
    ) -> Option<Self> {
        let identity = |(access, secret, actions): (&str, &str, &[&str])| {
            let actions = actions
                .iter()
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(",");
            format!(
                "{{\"name\":\"{access}\",\"credentials\":[{{\"accessKey\":\"{access}\",\"secretKey\":\"{secret}\"}}],\"actions\":[{actions}]}}"
            )
        };
        let all: &[&str] = &["Admin", "Read", "Write", "List", "Tagging"];
        let mut entries = vec![identity((ACCESS_KEY, SECRET_KEY, all))];
        entries.extend(identities.iter().copied().map(identity));
        let config = format!("{{\"identities\":[{}]}}", entries.join(","));
        Self::start_with(name, Some(config)).await
    }

    async fn start_with(name: &str, identities: Option<String>) -> Option<Self> {
        let Some(binary) = weed_binary() else {
            unavailable("the SeaweedFS `weed` binary (set FENCE_WEED_BIN or run scripts/test)")?;
            return None;
        };
        let started =
            ManagedProcess::start_async("weed mini", "seaweedfs-tests", name, |process| {
                let server = WeedServer {
                    binary: binary.clone(),
                    ports: free_ports(),
                    process,
                    identities: identities.clone(),
                };
                async move { server.spawn().await.then_some(server) }
            })
            .await;
        Some(started)
    }

    /// Starts the server on its ports; false if they turned out to be another process's.
    async fn spawn(&self) -> bool {
        let [s3, master, volume, filer] = self.ports;
        let dir = self.process.dir();
        let log = std::fs::File::create(dir.join("weed.log")).expect("log file");
        let mut command = Command::new(&self.binary);
        command
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .arg("mini")
            .arg(format!("-dir={}", dir.join("data").display()))
            .args([
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                "-webdav=false",
                "-admin.ui=false",
            ])
            .args([
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.telemetry=false",
            ])
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-master.port={master}"))
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-filer.port={filer}"))
            .arg(format!("-bucket={BUCKET}"));
        if let Some(identities) = &self.identities {
            let path = dir.join("identities.json");
            std::fs::write(&path, identities).expect("identities file");
            command.arg(format!("-s3.config={}", path.display()));
        }
        command
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log));
        let mut readiness = self
            .process
            .spawn(&mut command, s3, Duration::from_secs(60));
        let client = client(&self.endpoint());
        loop {
            // Writable, not only answering: a restarted SeaweedFS may answer HEAD before its
            // volume server takes data. The probe carries bytes (an empty object needs no
            // volume) and is read back.
            let answering = client.head_bucket().bucket(BUCKET).send().await.is_ok()
                && client
                    .put_object()
                    .bucket(BUCKET)
                    .key(READY_PROBE_KEY)
                    .body(vec![b'r'; 1024].into())
                    .send()
                    .await
                    .is_ok()
                && read_back(&client).await == Some(1024);
            if let Some(ours) = self.process.ready(&mut readiness, answering) {
                return ours;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its S3 endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports[0])
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// SIGKILL and start again on the same ports and data.
    pub async fn kill_and_restart(&self) {
        self.process.kill();
        assert!(
            self.spawn().await,
            "another process took a port of weed mini while it was down"
        );
    }

    /// SIGSTOP or SIGCONT the server.
    pub fn signal(&self, signal: &str) {
        self.process.signal(signal);
    }
}
