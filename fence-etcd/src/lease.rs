//! `EtcdLeases`: the lock etcd users run, made safe by a token. A holder's lock key is created
//! under its etcd lease, only if absent, in one txn; the key's `create_revision` is the token.
//! When the lease ends (revoked, or not kept alive within its TTL) etcd deletes the key, and
//! the next holder's key is created at a later, greater revision.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, KeyValue, LeaseTimeToLiveOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchFilterType, WatchOptions,
};
use fence_core::raw::{check_lease_ttl, held_until};
use fence_core::{
    Domain, FenceError, InvalidInput, Lease, LeaseHolder, LeaseManager, Operation, OwnerId,
};

use crate::error::{corrupt, map_error, EtcdFenceError, BACKEND};
use crate::issuer::revision_token;
use crate::Etcd;

/// etcd's greatest lease TTL (`MaxLeaseTTL`), in seconds.
pub const MAX_LEASE_TTL_SECS: u64 = 9_000_000_000;

/// The lock key's value: this marker, then the owner's escaped id.
const HOLDER_MARKER: &str = "fence-lease/1 ";

/// Leases on etcd whose token is the lock key's `create_revision`.
///
/// - `acquire` grants an etcd lease of the TTL rounded up to whole seconds (etcd raises it to
///   its minimum, about 2 s by default: the lease can outlive a shorter TTL, never the
///   reverse) and creates the domain's lock key under it if no key exists. The returned
///   [`Lease::valid_until`] counts the TTL asked for, less the drift bound
///   ([`fence_core::raw::held_until`]), from before the request, so it errs early.
/// - `renew` is a keep-alive of the lock key's etcd lease, after checking that the key is still
///   this holder's (same `create_revision` and owner); etcd renews to the granted TTL.
/// - `release` revokes the etcd lease, which deletes the key in the same step.
/// - A lock key Fence did not write (another tool's data, or a key without a lease, which would
///   never expire) is [`FenceError::CorruptState`]: never a second holder.
/// - [`LeaseManager::wait_for_release`] watches the lock key for its deletion: no polling.
#[derive(Clone, Debug)]
pub struct EtcdLeases {
    etcd: Etcd,
}

/// Who holds a lock key, as its value and metadata say.
struct Holder {
    owner: String,
    lease: i64,
    create_revision: i64,
}

impl EtcdLeases {
    pub(crate) fn new(etcd: Etcd) -> Self {
        EtcdLeases { etcd }
    }

    fn holder(domain: &Domain, kv: &KeyValue) -> Result<Holder, FenceError> {
        let owner = std::str::from_utf8(kv.value())
            .ok()
            .and_then(|text| text.strip_prefix(HOLDER_MARKER))
            .ok_or_else(|| {
                corrupt(
                    domain,
                    format!(
                        "lock key `{}` holds data Fence did not write",
                        String::from_utf8_lossy(kv.key())
                    ),
                )
            })?;
        if kv.lease() == 0 {
            return Err(corrupt(
                domain,
                format!(
                    "lock key `{}` has no etcd lease: it would never expire",
                    String::from_utf8_lossy(kv.key())
                ),
            ));
        }
        Ok(Holder {
            owner: owner.to_owned(),
            lease: kv.lease(),
            create_revision: kv.create_revision(),
        })
    }

    /// The lock key as etcd holds it now (`None`: no holder).
    async fn lock_key(&self, domain: &Domain) -> Result<(Option<KeyValue>, i64), FenceError> {
        let response = self
            .etcd
            .etcd_client()
            .kv_client()
            .get(self.etcd.keys().lock(domain), None)
            .await
            .map_err(|e| map_error(e, domain, Operation::Lease, false))?;
        let revision = response.header().map_or(0, |h| h.revision());
        Ok((response.kvs().first().cloned(), revision))
    }

    /// The lock key if it is still `lease`'s, else `LeaseLost`.
    async fn still_held(&self, lease: &Lease) -> Result<Holder, FenceError> {
        let (kv, _) = self.lock_key(&lease.domain).await?;
        let holder = kv.and_then(|kv| Self::holder(&lease.domain, &kv).ok());
        match holder {
            Some(holder)
                if u64::try_from(holder.create_revision).ok() == Some(lease.token.get())
                    && holder.owner == lease.owner.escaped() =>
            {
                Ok(holder)
            }
            _ => Err(lost(lease)),
        }
    }

    /// Revokes an etcd lease, ignoring every failure (it expires by itself anyway).
    async fn revoke_quietly(&self, id: i64) -> bool {
        self.etcd
            .etcd_client()
            .lease_client()
            .revoke(id)
            .await
            .is_ok()
    }

    async fn acquire_now(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        if seconds > MAX_LEASE_TTL_SECS {
            return Err(InvalidInput::Configuration(format!(
                "lease TTL of {seconds} s for domain `{domain}` is above etcd's maximum of {MAX_LEASE_TTL_SECS} s"
            ))
            .into());
        }
        let key = self.etcd.keys().lock(domain);
        let value = format!("{HOLDER_MARKER}{}", owner.escaped());
        // A few rounds at most: again after ending this owner's own earlier lease, or when the
        // new etcd lease ended before the txn could use it (a stalled client).
        let mut vanished = None;
        for _ in 0..3 {
            let started = Instant::now();
            let granted = self.grant(domain, seconds).await?;
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(
                        key.clone(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(granted.id)),
                    ),
                    TxnOp::get(key.clone(), None),
                ])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = match self.etcd.etcd_client().kv_client().txn(txn).await {
                Ok(response) => response,
                Err(etcd_client::Error::GRpcStatus(status))
                    if status.code() == tonic::Code::NotFound =>
                {
                    // "requested lease not found": nothing was created.
                    vanished = Some(status);
                    continue;
                }
                Err(error) => {
                    // Revoking the new lease undoes a create whose answer was lost.
                    let undone = granted.revoke().await;
                    return Err(map_error(error, domain, Operation::Lease, !undone));
                }
            };
            let current = response
                .op_responses()
                .into_iter()
                .rev()
                .find_map(|r| match r {
                    TxnOpResponse::Get(get) => get.kvs().first().cloned(),
                    _ => None,
                });
            if response.succeeded() {
                // Without a token the lock is of no use: dropping `granted` revokes it.
                let created = current.map_or(0, |kv| kv.create_revision());
                let token = revision_token(domain, created)?;
                granted.keep();
                return Ok(Lease::new(
                    domain.clone(),
                    owner.clone(),
                    token,
                    held_until(started, ttl),
                ));
            }
            granted.revoke().await;
            let Some(current) = current else {
                continue; // released between the compare and the read: try again
            };
            let holder = Self::holder(domain, &current)?;
            if holder.owner != owner.escaped() {
                return Err(FenceError::LeaseHeld {
                    domain: domain.clone(),
                });
            }
            // The same owner acquires again: its earlier lease ends, and its key with it, if
            // that lease holds nothing else (another tool's keys under it stay untouched).
            self.end_own_lease(domain, &holder, &key).await?;
        }
        match vanished {
            // The client stalls longer than the lease lives: a retry may get through.
            Some(status) => Err(FenceError::backend(
                BACKEND,
                fence_core::BackendErrorKind::Unavailable,
                Some(domain),
                EtcdFenceError::Client(etcd_client::Error::GRpcStatus(status)),
            )),
            None => Err(FenceError::LeaseHeld {
                domain: domain.clone(),
            }),
        }
    }

    /// Grants an etcd lease of `seconds`, revoked when dropped unless kept: an acquisition
    /// cancelled half-way leaves no lock behind for the whole TTL.
    async fn grant(&self, domain: &Domain, seconds: u64) -> Result<Granted, FenceError> {
        let grant = self
            .etcd
            .etcd_client()
            .lease_client()
            .grant(i64::try_from(seconds).unwrap_or(i64::MAX), None)
            .await
            .map_err(|e| map_error(e, domain, Operation::Lease, false))?;
        let granted = Granted {
            client: self.etcd.etcd_client().clone(),
            id: grant.id(),
            armed: true,
        };
        if !grant.error().is_empty() {
            return Err(FenceError::backend(
                BACKEND,
                fence_core::BackendErrorKind::Rejected,
                Some(domain),
                EtcdFenceError::LeaseGrant(grant.error().to_owned()),
            ));
        }
        Ok(granted)
    }

    /// Revokes this owner's earlier etcd lease found on the lock key, after checking that it
    /// holds the lock key alone.
    async fn end_own_lease(
        &self,
        domain: &Domain,
        holder: &Holder,
        key: &str,
    ) -> Result<(), FenceError> {
        let attached = self
            .etcd
            .etcd_client()
            .lease_client()
            .time_to_live(
                holder.lease,
                Some(LeaseTimeToLiveOptions::new().with_keys()),
            )
            .await
            .map_err(|e| map_error(e, domain, Operation::Lease, false))?;
        if attached
            .keys()
            .iter()
            .any(|k| k.as_slice() != key.as_bytes())
        {
            return Err(corrupt(
                domain,
                format!(
                    "the etcd lease {} of lock key `{key}` also holds other keys",
                    holder.lease
                ),
            ));
        }
        self.revoke_quietly(holder.lease).await;
        Ok(())
    }

    async fn renew_now(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        let started = Instant::now();
        let holder = self.still_held(lease).await?;
        let mut client = self.etcd.etcd_client().lease_client();
        let kept = async {
            // The stream answers a first keep-alive before it is returned; a second one reports
            // the TTL etcd renews to (the one granted at acquisition).
            let (mut keeper, mut stream) = client.keep_alive(holder.lease).await?;
            keeper.keep_alive().await?;
            stream.message().await?.map(|r| r.ttl()).ok_or_else(|| {
                etcd_client::Error::LeaseKeepAliveError("the keep-alive stream ended".into())
            })
        };
        match kept.await {
            Ok(granted) if granted > 0 => {
                // etcd renews to the granted TTL, whatever `ttl` asks: the lease ends at the
                // earlier of the two.
                let granted = Duration::from_secs(u64::try_from(granted).unwrap_or(0));
                Ok(Lease::new(
                    lease.domain.clone(),
                    lease.owner.clone(),
                    lease.token,
                    held_until(started, ttl.min(granted)),
                ))
            }
            Ok(_) => Err(lost(lease)),
            Err(error) => {
                // "lease not found": ended since the check. Anything else: ask etcd.
                let remaining = client.time_to_live(holder.lease, None).await;
                match remaining {
                    Ok(answer) if answer.ttl() <= 0 => Err(lost(lease)),
                    _ => Err(map_error(error, &lease.domain, Operation::Lease, false)),
                }
            }
        }
    }

    async fn release_now(&self, lease: &Lease) -> Result<(), FenceError> {
        let holder = self.still_held(lease).await?;
        match self
            .etcd
            .etcd_client()
            .lease_client()
            .revoke(holder.lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(etcd_client::Error::GRpcStatus(status))
                if status.code() == tonic::Code::NotFound =>
            {
                Err(lost(lease))
            }
            Err(error) => Err(map_error(error, &lease.domain, Operation::Lease, false)),
        }
    }

    /// Watches the lock key until it is deleted, or `within` passes.
    async fn watch_release(&self, domain: &Domain, within: Duration) -> Result<(), FenceError> {
        let (kv, revision) = self.lock_key(domain).await?;
        if kv.is_none() {
            return Ok(());
        }
        let options = WatchOptions::new()
            .with_start_revision(revision + 1)
            .with_filters([WatchFilterType::NoPut]);
        let mut stream = self
            .etcd
            .etcd_client()
            .watch_client()
            .watch(self.etcd.keys().lock(domain), Some(options))
            .await
            .map_err(|e| map_error(e, domain, Operation::Lease, false))?;
        let deleted = async {
            while let Some(response) = stream
                .message()
                .await
                .map_err(|e| map_error(e, domain, Operation::Lease, false))?
            {
                if response.canceled()
                    || response
                        .events()
                        .iter()
                        .any(|e| e.event_type() == EventType::Delete)
                {
                    return Ok(());
                }
            }
            Ok(())
        };
        tokio::time::timeout(within, deleted)
            .await
            .unwrap_or(Ok(()))
    }
}

/// A granted etcd lease, revoked in the background when dropped unless [`Granted::keep`] was
/// called.
struct Granted {
    client: etcd_client::Client,
    id: i64,
    armed: bool,
}

impl Granted {
    /// The lease now belongs to a lock key: keep it.
    fn keep(mut self) {
        self.armed = false;
    }

    /// Revokes it now; true when etcd confirmed (else, or if cancelled meanwhile, the drop
    /// tries again in the background).
    async fn revoke(mut self) -> bool {
        let revoked = self.client.lease_client().revoke(self.id).await.is_ok();
        self.armed = !revoked;
        revoked
    }
}

impl Drop for Granted {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (mut leases, id) = (self.client.lease_client(), self.id);
            runtime.spawn(async move {
                let _ = leases.revoke(id).await;
            });
        }
    }
}

fn lost(lease: &Lease) -> FenceError {
    FenceError::LeaseLost {
        domain: lease.domain.clone(),
        token: lease.token,
    }
}

#[async_trait]
impl LeaseManager for EtcdLeases {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// The lock key's owner and `create_revision`, and its etcd lease's remaining TTL (whole
    /// seconds, etcd's clock).
    async fn holder(&self, domain: &Domain) -> Result<Option<LeaseHolder>, FenceError> {
        let (Some(kv), _) = self.lock_key(domain).await? else {
            return Ok(None);
        };
        let holder = Self::holder(domain, &kv)?;
        let owner = OwnerId::from_escaped(&holder.owner)
            .ok_or_else(|| corrupt(domain, "lock key names no valid owner"))?;
        let token = revision_token(domain, holder.create_revision)?;
        let remaining = self
            .etcd
            .etcd_client()
            .lease_client()
            .time_to_live(holder.lease, None)
            .await
            .ok()
            .and_then(|answer| u64::try_from(answer.ttl()).ok())
            .map(Duration::from_secs);
        Ok(Some(LeaseHolder::new(owner, token, remaining)))
    }

    async fn wait_for_release(&self, domain: &Domain, within: Duration) {
        if let Err(error) = self.watch_release(domain, within).await {
            // Unreachable now: the caller's next attempt reports it; do not spin meanwhile.
            tracing::debug!(%error, domain = domain.as_str(), "watching the lock key failed");
            tokio::time::sleep(within.min(Duration::from_millis(50))).await;
        }
    }

    async fn acquire(
        &self,
        domain: &Domain,
        owner: &OwnerId,
        ttl: Duration,
    ) -> Result<Lease, FenceError> {
        check_lease_ttl(domain, ttl)?;
        self.acquire_now(domain, owner, ttl).await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease, FenceError> {
        check_lease_ttl(&lease.domain, ttl)?;
        self.renew_now(lease, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), FenceError> {
        self.release_now(lease).await
    }
}
