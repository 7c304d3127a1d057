//! Which of the operations the fence needs the store's credentials allow: each one used for
//! real on a probe object under the fence's prefix.

use bytes::Bytes;
use fence_core::permissions::{Access, Permission, PermissionReport, PROBE_SEGMENT};
use fence_core::{Domain, FenceError, Operation};
use fence_objects::fresh_nonce;
use object_store::{ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use crate::error::{store_error, BACKEND};
use crate::fence::path_of;
use crate::ObjectStoreFence;

impl ObjectStoreFence {
    /// Lists the prefix, creates a probe object under it (`<prefix>!probe!<nonce>`), replaces
    /// it conditionally, reads it and deletes it, and reports which of these the store
    /// refused. The operations map to each cloud's permissions as the crate docs'
    /// "Permissions" section says (S3 IAM actions, Azure RBAC data actions or SAS
    /// permissions, Google Cloud Storage IAM permissions). A refused create leaves the rest
    /// unknown; a refused delete leaves the probe object behind.
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let store = &self.inner.store;
        let prefix = self.prefix();
        let mut report = PermissionReport::new(BACKEND, format!("{store}, prefix `{prefix}`"));
        let domain = Domain::new(PROBE_SEGMENT)?;
        let access = |outcome: Result<(), object_store::Error>, operation: Operation| {
            Access::of(&outcome.map_err(|e| store_error(e, &domain, operation, false)))
        };
        let listed = store
            .list_with_delimiter(self.prefix_folder().as_ref())
            .await
            .map(|_| ());
        report.push(Permission::new(
            format!("list objects under `{prefix}`"),
            "retiring a domain (finding its immutable objects)",
            access(listed, Operation::Read),
        ));

        let path = path_of(&self.inner.keys.probe(fresh_nonce()))?;
        let put = |mode: PutMode| {
            store.put_opts(
                &path,
                Bytes::from_static(b"permission probe").into(),
                PutOptions::from(mode),
            )
        };
        let created = put(PutMode::Create).await;
        let version = created
            .as_ref()
            .ok()
            .map(|r| UpdateVersion::from(r.clone()));
        report.push(Permission::new(
            format!("create objects under `{prefix}`"),
            "a domain's first write, and immutable objects",
            access(created.map(|_| ()), Operation::Write),
        ));
        let Some(version) = version else {
            let why = || Access::Unknown("no probe object: creating one was refused".into());
            for (name, needed_for) in [
                (
                    "replace objects",
                    "every later write, claim and delete (a tombstone)",
                ),
                (
                    "read objects",
                    "every read, and a write's first read of an object",
                ),
                (
                    "delete objects",
                    "removing the probe objects, and retiring a domain",
                ),
            ] {
                report.push(Permission::new(
                    format!("{name} under `{prefix}`"),
                    needed_for,
                    why(),
                ));
            }
            return Ok(report);
        };
        let replaced = put(PutMode::Update(version)).await.map(|_| ());
        report.push(Permission::new(
            format!("replace objects under `{prefix}`"),
            "every later write, claim and delete (a tombstone)",
            access(replaced, Operation::Write),
        ));
        let read = match store.get(&path).await {
            Ok(result) => result.bytes().await.map(|_| ()),
            Err(error) => Err(error),
        };
        report.push(Permission::new(
            format!("read objects under `{prefix}`"),
            "every read, and a write's first read of an object",
            access(read, Operation::Read),
        ));
        let deleted = store.delete(&path).await;
        if deleted.is_err() {
            tracing::warn!(%store, %path, "deleting the permission probe object was refused: it stays");
        }
        report.push(
            Permission::new(
                format!("delete objects under `{prefix}`"),
                "retire, qualify and removing the probe objects (fenced deletes write tombstones)",
                access(deleted, Operation::Delete),
            )
            .for_operators(),
        );
        Ok(report)
    }
}
