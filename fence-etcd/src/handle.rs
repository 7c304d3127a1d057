//! `Etcd`: a client and a key prefix, from which the fence, the leases and the issuer come.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use fence_core::{BoundsConfig, FenceError, InvalidInput, Observed};

use crate::error::{kind_of, EtcdFenceError, BACKEND};
use crate::keys::Keys;
use crate::{EtcdIssuer, EtcdLeases};

/// A connection to etcd and the key prefix under which Fence keeps its state.
///
/// Cheap to clone (the client's channels are shared). The fenced store, the leases and the
/// issuer made from one `Etcd` share its prefix; tokens from its leases and its issuer are
/// revisions of one cluster and so comparable with each other, and with nothing else.
///
/// ```no_run
/// # async fn run() -> Result<(), fence_core::FenceError> {
/// let etcd = fence_etcd::Etcd::connect(&["http://127.0.0.1:2379"], None, "/fence").await?;
/// let (fence, leases, issuer) = (etcd.fence(), etcd.leases(), etcd.issuer());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    keys: Arc<Keys>,
    /// Bounds every fence made by [`Etcd::fence_builder`] starts with (set by [`Etcd::from_env`]).
    pub(crate) fence_bounds: BoundsConfig,
}

/// The connect timeout [`Etcd::connect`] uses when no options are given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The per-request timeout [`Etcd::connect`] uses when no options are given.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl Etcd {
    /// Fence's state under `prefix` (e.g. `/fence`), through a client you built (TLS, auth,
    /// timeouts are the client's: set a request timeout, or a hung server hangs callers).
    pub fn new(client: Client, prefix: &str) -> Result<Self, InvalidInput> {
        Ok(Etcd {
            client,
            keys: Arc::new(Keys::new(prefix)?),
            fence_bounds: BoundsConfig::NONE,
        })
    }

    /// Connects to `endpoints` with `options` (by default: a 5 s connect timeout and a 10 s
    /// request timeout), with the auth token refreshed when it expires (etcd forgets tokens
    /// on restart). With a user and password in `options`, the login happens here: refused, it
    /// is [`fence_core::BackendErrorKind::PermissionDenied`]; an endpoint that is down is
    /// `Unavailable`. Without credentials the client connects lazily, and an endpoint that is
    /// down fails at the first request.
    pub async fn connect<E: AsRef<str>>(
        endpoints: &[E],
        options: Option<ConnectOptions>,
        prefix: &str,
    ) -> Result<Self, FenceError> {
        let keys = Keys::new(prefix)?;
        let options = options.unwrap_or_else(|| {
            ConnectOptions::new()
                .with_connect_timeout(DEFAULT_CONNECT_TIMEOUT)
                .with_timeout(DEFAULT_REQUEST_TIMEOUT)
        });
        let options = options.with_auto_token_refresh(true);
        let client = Client::connect(endpoints, Some(options))
            .await
            .map_err(|error| {
                FenceError::backend(
                    BACKEND,
                    kind_of(&error),
                    None,
                    EtcdFenceError::Client(error),
                )
            })?;
        Ok(Etcd {
            client,
            keys: Arc::new(keys),
            fence_bounds: BoundsConfig::NONE,
        })
    }

    /// Leases whose token is the lock key's `create_revision`, inside the telemetry layer.
    pub fn leases(&self) -> Observed<EtcdLeases> {
        Observed::new(EtcdLeases::new(self.clone()))
    }

    /// A token issuer on the cluster's revision, inside the telemetry layer.
    pub fn issuer(&self) -> Observed<EtcdIssuer> {
        Observed::new(EtcdIssuer::new(self.clone()))
    }

    /// The client underneath (clone it to make requests of your own, which nothing fences).
    /// Unstable, behind the `unstable-raw` feature.
    #[cfg(feature = "unstable-raw")]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The client underneath, for this crate's own requests.
    pub(crate) fn etcd_client(&self) -> &Client {
        &self.client
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.keys.prefix()
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }
}

impl fmt::Debug for Etcd {
    // The client's options may hold a password: only the prefix is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("prefix", &self.keys.prefix())
            .finish_non_exhaustive()
    }
}
