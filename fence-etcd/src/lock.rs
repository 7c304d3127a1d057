//! Tokens for the lock etcd users already run: etcd's own Lock API (`etcdctl lock`,
//! `etcd_client::Client::lock`, client-go's `concurrency.Mutex`) hands the holder a key created
//! under its lease; holders are served in the order of their keys' `create_revision`, so that
//! revision, read back, is a fencing token.

use etcd_client::Client;
use fence_core::{BackendErrorKind, Domain, FenceError, FencingToken, Operation};

use crate::error::{map_error, BACKEND};
use crate::issuer::revision_token;

/// The fencing token of a lock held through etcd's Lock API: the `create_revision` of the key
/// `Lock` returned (`lock_key`). `domain` names what the lock protects, for errors.
///
/// Call it right after `Lock` returns and carry the token on every protected write. A key that
/// is already gone (the lease expired, or it was unlocked) is
/// [`BackendErrorKind::NotFound`]: the lock is not held, and no token is returned. Tokens from
/// one cluster's locks, [`crate::EtcdLeases`] and [`crate::EtcdIssuer`] are comparable; do not
/// mix them with another issuer's for the same domain.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use fence_etcd::etcd_client::{Client, LockOptions};
/// let mut client = Client::connect(["http://127.0.0.1:2379"], None).await?;
/// let lease = client.lease_grant(10, None).await?.id();
/// let held = client.lock("jobs/nightly", Some(LockOptions::new().with_lease(lease))).await?;
/// let domain = fence_core::Domain::new("jobs/nightly")?;
/// let token = fence_etcd::lock_token(&client, &domain, held.key()).await?;
/// # Ok(()) }
/// ```
pub async fn lock_token(
    client: &Client,
    domain: &Domain,
    lock_key: &[u8],
) -> Result<FencingToken, FenceError> {
    let response = client
        .kv_client()
        .get(lock_key, None)
        .await
        .map_err(|e| map_error(e, domain, Operation::Lease, false))?;
    match response.kvs().first() {
        Some(kv) => revision_token(domain, kv.create_revision()),
        None => Err(FenceError::backend(
            BACKEND,
            BackendErrorKind::NotFound,
            Some(domain),
            crate::EtcdFenceError::LockGone(String::from_utf8_lossy(lock_key).into_owned()),
        )),
    }
}
