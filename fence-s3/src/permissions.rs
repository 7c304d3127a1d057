//! Which of the IAM actions the fence needs its credentials have: each one used for real on
//! a probe object under the fence's prefix.

use fence_core::permissions::{Access, Permission, PermissionReport};
use fence_core::{Domain, FenceError, Operation};

use crate::error::{classify, Failure, BACKEND};
use crate::requests::Expect;
use crate::S3Fence;
use fence_objects::fresh_nonce;

impl S3Fence {
    /// Uses each IAM action the fence needs on a probe object under the prefix
    /// (`<prefix>!probe!<nonce>`, deleted at the end) and reports which the bucket refused:
    /// `s3:ListBucket` (without it S3 answers a missing object with 403 instead of 404, so a
    /// fresh domain looks forbidden), `s3:PutObject` with the fence's object options
    /// (`s3:PutObjectTagging` with tags, the KMS key's `kms:GenerateDataKey` with SSE-KMS),
    /// `s3:GetObject` (with `kms:Decrypt` under SSE-KMS) and `s3:DeleteObject` (retirement,
    /// the capability probe and `fence qualify` delete; a refusal leaves the probe object
    /// behind).
    /// See the crate docs, "Permissions".
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let bucket = &self.inner.bucket;
        let prefix = self.inner.keys.prefix();
        let mut report =
            PermissionReport::new(BACKEND, format!("bucket {bucket}, prefix `{prefix}`"));
        let domain = Domain::new(fence_core::permissions::PROBE_SEGMENT)?;
        let access = |outcome: Result<(), Failure>, operation: Operation| {
            Access::of(
                &outcome.map_err(|failure| failure.into_fence_error(&domain, operation, false)),
            )
        };
        let listed = self
            .inner
            .client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .max_keys(1)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(e, bucket));
        report.push(Permission::new(
            format!("s3:ListBucket on {bucket} (prefix `{prefix}`)"),
            "telling a missing object (404) from a forbidden one (403)",
            access(listed, Operation::Read),
        ));

        let key = self.inner.keys.probe(fresh_nonce());
        let options = &self.inner.object_options;
        let mut put_name = format!("s3:PutObject on {bucket}/{prefix}*");
        if !options.tag_map().is_empty() {
            put_name.push_str(", s3:PutObjectTagging");
        }
        if options.encryption_value().is_some() {
            put_name.push_str(", and the KMS key's kms:GenerateDataKey under SSE-KMS");
        }
        let put = self
            .put_conditional(&key, "permission probe".into(), &Expect::Absent, options)
            .await
            .map(|_| ());
        let put_granted = put.is_ok();
        report.push(Permission::new(
            put_name,
            "every write, claim and delete (a tombstone)",
            access(put, Operation::Write),
        ));

        let (get, delete) = if put_granted {
            let get = self
                .inner
                .client
                .get_object()
                .bucket(bucket)
                .key(&key)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify(e, bucket));
            let delete = self
                .inner
                .client
                .delete_object()
                .bucket(bucket)
                .key(&key)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify(e, bucket));
            (
                access(get, Operation::Read),
                access(delete, Operation::Delete),
            )
        } else {
            let why = || Access::Unknown("no probe object: s3:PutObject was not granted".into());
            (why(), why())
        };
        report.push(Permission::new(
            format!("s3:GetObject on {bucket}/{prefix}*"),
            "every read, and every write's first read of an object",
            get,
        ));
        if let Access::Denied(_) = &delete {
            tracing::warn!(%bucket, %key, "s3:DeleteObject denied: the permission probe object stays");
        }
        report.push(Permission::new(
            format!("s3:DeleteObject on {bucket}/{prefix}*"),
            "retire, qualify and removing the capability probe's object (fenced deletes write tombstones)",
            delete,
        )
        .for_operators());
        Ok(report)
    }
}
