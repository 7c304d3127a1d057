//! Which of the etcd role permissions the fence needs its user has: each key range used for
//! real on keys no domain can have (`…/!permission-probe`), so no domain's state is touched.

use std::future::Future;

use etcd_client::{Client, PutOptions};
use fence_core::permissions::{Access, Permission, PermissionReport, PROBE_SEGMENT};
use fence_core::FenceError;

use crate::error::{kind_of, EtcdFenceError};
use crate::{Etcd, BACKEND};

impl Etcd {
    /// Reads, writes and deletes a probe key in each key range the fence uses —
    /// `<prefix>/store/` (the fenced store), `<prefix>/issued/` (`EtcdIssuer`), and
    /// `<prefix>/lease/` under an etcd lease of its own (`EtcdLeases`) — and reports which the
    /// cluster's authentication refused, by range (the user's role needs `readwrite` on each;
    /// see the crate docs, "Permissions"). The probe keys sit where a domain's escaped name
    /// would, under a segment no domain has.
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let prefix = self.keys().prefix().to_owned();
        let mut report = PermissionReport::new(BACKEND, format!("prefix `{prefix}`"));
        let client = self.etcd_client().clone();
        for (key, name, needed_for) in [
            (
                format!("{prefix}/store/{PROBE_SEGMENT}/state"),
                format!("read on `{prefix}/store/`"),
                "reads, and every write's first read",
            ),
            (
                format!("{prefix}/settings"),
                format!("read on `{prefix}/settings`"),
                "every write and claim (the prefix's admission settings; operators: readwrite)",
            ),
        ] {
            report.push(Permission::new(
                name,
                needed_for,
                access(client.clone(), |mut c| async move {
                    c.get(key, None).await.map(|_| ())
                })
                .await,
            ));
        }
        for (range, needed_for) in [
            ("store", "claims, writes and deletes"),
            ("issued", "EtcdIssuer"),
        ] {
            let key = format!("{prefix}/{range}/{PROBE_SEGMENT}");
            report.push(Permission::new(
                format!("readwrite on `{prefix}/{range}/`"),
                needed_for,
                access(client.clone(), |mut c| async move {
                    c.put(key.clone(), "permission probe", None).await?;
                    c.delete(key, None).await.map(|_| ())
                })
                .await,
            ));
        }
        let lock = format!("{prefix}/lease/{PROBE_SEGMENT}");
        report.push(Permission::new(
            format!("readwrite on `{prefix}/lease/`"),
            "EtcdLeases (and issued-only checks)",
            access(client, |mut c| async move {
                let lease = c.lease_grant(5, None).await?.id();
                let put = c
                    .put(
                        lock,
                        "permission probe",
                        Some(PutOptions::new().with_lease(lease)),
                    )
                    .await;
                // Revoking the lease deletes the key; it expires in seconds anyway.
                let _ = c.lease_revoke(lease).await;
                put.map(|_| ())
            })
            .await,
        ));
        Ok(report)
    }
}

/// What running `probe` on a clone of `client` says of the permission it needs.
async fn access<F, Fut>(client: Client, probe: F) -> Access
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<(), etcd_client::Error>>,
{
    let outcome = probe(client).await.map_err(|error| {
        FenceError::backend(
            BACKEND,
            kind_of(&error),
            None,
            EtcdFenceError::Client(error),
        )
    });
    Access::of(&outcome)
}
