//! Retiring a domain on S3: its fenced object and its immutable data objects
//! (`<prefix>!data!<escaped domain>!…`), deleted (S3 has no leases to check).

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::error::classify;
use crate::S3Fence;

#[async_trait]
impl Retirer for S3Fence {
    /// Needs `s3:DeleteObject` and `s3:ListBucket` on the prefix.
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        let bucket = &self.inner.bucket;
        let fail = |failure: crate::error::Failure| {
            failure.into_fence_error(domain, Operation::Delete, false)
        };
        let object = self.object_key(domain)?;
        let mut doomed = vec![object.clone()];
        let data_prefix = self.inner.keys.data_prefix(domain);
        let mut continuation = None;
        loop {
            let page = self
                .inner
                .client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(&data_prefix)
                .set_continuation_token(continuation)
                .send()
                .await
                .map_err(|e| fail(classify(e, bucket)))?;
            doomed.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
            continuation = page.next_continuation_token().map(str::to_owned);
            if continuation.is_none() {
                break;
            }
        }
        let mut removed = 0;
        for key in &doomed {
            // HEAD first: S3 answers a delete of a missing key with success, and the count says
            // what was there.
            let exists = self
                .inner
                .client
                .head_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .is_ok();
            self.inner
                .client
                .delete_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .map_err(|e| fail(classify(e, bucket)))?;
            removed += usize::from(exists);
        }
        self.inner.cache.remove(&object);
        Ok(Retired::new(removed))
    }
}
