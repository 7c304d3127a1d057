//! Which of the etcd role permissions the fence needs its user has: each operation the fence,
//! its issuer and its leases perform, run for real on a probe domain.

use std::time::Duration;

use fence_core::permissions::{Access, Permission, PermissionReport};
use fence_core::{Domain, Fence, FenceError, FencedStore, LeaseManager, OwnerId, TokenIssuer};

use crate::{Etcd, BACKEND};

/// The domain the probe uses (its mark and issued revisions stay, like every domain's).
pub const PERMISSION_PROBE_DOMAIN: &str = "fence-permission-probe";

impl Etcd {
    /// Runs a read, an issue, a lease's acquisition and release, and a claim on the domain
    /// [`PERMISSION_PROBE_DOMAIN`], and reports which the cluster's authentication refused,
    /// by the key range the user's role must cover (`readwrite` on `<prefix>/store/`,
    /// `<prefix>/issued/`, `<prefix>/lease/`; see the crate docs, "Permissions").
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let domain = Domain::new(PERMISSION_PROBE_DOMAIN)?;
        let prefix = self.keys().prefix().to_owned();
        let mut report = PermissionReport::new(BACKEND, format!("prefix `{prefix}`"));
        let fence = self.fence();
        report.push(Permission::new(
            format!("read on `{prefix}/store/`"),
            "reads, and every write's first read",
            Access::of(&fence.read(&domain).await),
        ));
        let issued = self.issuer().issue(&domain).await;
        report.push(Permission::new(
            format!("readwrite on `{prefix}/issued/`"),
            "EtcdIssuer",
            Access::of(&issued),
        ));
        let leases = self.leases();
        let lease = leases
            .acquire(
                &domain,
                &OwnerId::new("fence-permission-probe")?,
                Duration::from_secs(5),
            )
            .await;
        report.push(Permission::new(
            format!("readwrite on `{prefix}/lease/`"),
            "EtcdLeases (and issued-only checks)",
            Access::of(&lease),
        ));
        let token = match (&lease, &issued) {
            (Ok(lease), _) => Some(lease.token),
            (_, Ok(token)) => Some(*token),
            _ => None,
        };
        let claim = match token {
            Some(token) => Access::of(&fence.claim(&domain, token).await),
            None => Access::Unknown(
                "no token to claim with: neither issuing nor leasing was granted".into(),
            ),
        };
        if let Ok(lease) = &lease {
            let _ = leases.release(lease).await;
        }
        report.push(Permission::new(
            format!("readwrite on `{prefix}/store/`"),
            "claims, writes and deletes",
            claim,
        ));
        Ok(report)
    }
}
