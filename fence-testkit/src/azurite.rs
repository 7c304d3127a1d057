//! Azurite, Azure Blob Storage's emulator (npm `azurite`, installed by scripts/services.d/
//! azurite.sh), as processes a test owns.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use object_store::azure::MicrosoftAzureBuilder;

use crate::process::ManagedProcess;
use crate::unavailable;

/// Azurite's one account.
pub const ACCOUNT: &str = "devstoreaccount1";
/// Azurite's published development key for [`ACCOUNT`] (not a secret: every Azurite has it).
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
/// The Azurite `scripts/services` starts (for the examples and the benchmarks): its account's
/// URL on the default port…
pub const SHARED_ACCOUNT_URL: &str = "http://127.0.0.1:10100/devstoreaccount1";
/// …and its container.
pub const SHARED_CONTAINER: &str = "fence-examples";
/// The shared Azurite's account URL: `FENCE_AZURITE_URL` (which `scripts/services` sets when
/// `FENCE_AZURITE_PORT` moves it), else [`SHARED_ACCOUNT_URL`].
pub fn shared_account_url() -> String {
    std::env::var("FENCE_AZURITE_URL").unwrap_or_else(|_| SHARED_ACCOUNT_URL.to_owned())
}

/// The container the tests write to, created when the server starts.
pub const CONTAINER: &str = "fence-test";

/// Creates a container with @azure/storage-blob (installed beside Azurite): argv is the
/// install dir, the account URL, the container, the account and its key. One script, shared
/// with scripts/services.d/azurite.sh.
const CREATE_CONTAINER: &str = include_str!("../../scripts/services.d/azurite-container.js");

/// The Azurite install dir (`FENCE_AZURITE_DIR`, which scripts/test sets).
fn install_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var("FENCE_AZURITE_DIR").ok()?);
    dir.join("node_modules/.bin/azurite-blob")
        .exists()
        .then_some(dir)
}

/// An Azurite blob service owned by the test (its own port and data dir, the test container),
/// stopped when dropped.
pub struct AzuriteServer {
    install: PathBuf,
    port: u16,
    process: ManagedProcess,
}

impl AzuriteServer {
    /// Starts Azurite's blob service on a free port with [`CONTAINER`]; `None` (loud skip)
    /// without Azurite.
    pub fn start(name: &str) -> Option<Self> {
        let Some(install) = install_dir() else {
            unavailable("Azurite (set FENCE_AZURITE_DIR or run scripts/test)")?;
            return None;
        };
        Some(ManagedProcess::start(
            "azurite",
            "azurite-tests",
            name,
            |process| {
                let server = AzuriteServer {
                    install: install.clone(),
                    port: crate::free_port(),
                    process,
                };
                server.spawn().then_some(server)
            },
        ))
    }

    fn spawn(&self) -> bool {
        let dir = self.process.dir();
        let log = std::fs::File::create(dir.join("azurite.log")).expect("log file");
        let mut command = Command::new(self.install.join("node_modules/.bin/azurite-blob"));
        command
            .args([
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &self.port.to_string(),
            ])
            .arg("--location")
            .arg(dir.join("data"))
            .args(["--skipApiVersionCheck", "--silent"])
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log));
        let address = format!("127.0.0.1:{}", self.port);
        if !self
            .process
            .spawn_and_wait(&mut command, self.port, Duration::from_secs(60), || {
                crate::listens(&address)
            })
        {
            return false;
        }
        let created = Command::new("node")
            .args(["-e", CREATE_CONTAINER])
            .arg(&self.install)
            .arg(self.endpoint())
            .arg(CONTAINER)
            .arg(ACCOUNT)
            .arg(ACCOUNT_KEY)
            .output()
            .expect("node runs");
        assert!(
            created.status.success(),
            "creating Azurite's test container: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        true
    }

    /// The account's URL, `http://127.0.0.1:<port>/devstoreaccount1`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{ACCOUNT}", self.port)
    }

    /// Stops Azurite (SIGTERM: it saves its metadata on the way out) and starts it again on
    /// the same port and data.
    pub fn restart(&self) {
        self.process.stop(Duration::from_secs(10));
        assert!(
            self.spawn(),
            "another process took Azurite's port while it was down"
        );
    }
}

/// object_store's Azure Blob client builder for [`CONTAINER`] of the Azurite whose account URL
/// is `account_url` (an [`AzuriteServer::endpoint`], or a proxy's address before it), with the
/// development account's key; add client options and build.
pub fn azure_builder(account_url: &str) -> MicrosoftAzureBuilder {
    MicrosoftAzureBuilder::new()
        .with_account(ACCOUNT)
        .with_access_key(ACCOUNT_KEY)
        .with_container_name(CONTAINER)
        .with_endpoint(account_url.to_owned())
        .with_allow_http(true)
}
