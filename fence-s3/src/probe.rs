//! The capability probe: an endpoint that ignores conditional writes cannot fence anything.

use fence_core::{Domain, FenceError, Operation};

use crate::error::{backend_error, classify, Failure, S3FenceError};
use crate::requests::Expect;
use crate::S3Fence;
use fence_objects::fresh_nonce;

/// An ETag no object has.
const WRONG_ETAG: &str = "\"00000000000000000000000000000000\"";

impl S3Fence {
    /// Checks once that the endpoint enforces `If-None-Match: *` and `If-Match`, by writing a
    /// probe object under the prefix (`<prefix>!probe!<nonce>`, deleted afterwards).
    /// Runs before the first write, or in [`crate::S3FenceBuilder::connect`]; an endpoint that
    /// accepts a false condition is refused with [`S3FenceError::ConditionsIgnored`].
    pub async fn probe(&self) -> Result<(), FenceError> {
        self.inner
            .probed
            .get_or_try_init(|| self.run_probe())
            .await
            .map(|_| ())
    }

    async fn run_probe(&self) -> Result<(), FenceError> {
        let key = self.inner.keys.probe(fresh_nonce());
        let domain = Domain::new("fence-capability-probe")?;
        let fail = |failure: Failure| failure.into_fence_error(&domain, Operation::Write, false);
        let ignored = |detail: &str| {
            backend_error(
                None,
                S3FenceError::ConditionsIgnored {
                    detail: detail.to_owned(),
                },
            )
        };
        // Some servers create a missing bucket on the first write: ask for it explicitly.
        if let Err(error) = self
            .inner
            .client
            .head_bucket()
            .bucket(&self.inner.bucket)
            .send()
            .await
        {
            return Err(match classify(error, &self.inner.bucket) {
                Failure::NotFound => backend_error(
                    None,
                    S3FenceError::NoSuchBucket {
                        bucket: self.inner.bucket.clone(),
                    },
                ),
                failure => fail(failure),
            });
        }
        let options = &self.inner.object_options;
        self.put_conditional(&key, "probe".into(), &Expect::Absent, options)
            .await
            .map_err(fail)?;
        let result = match self
            .put_conditional(&key, "create again".into(), &Expect::Absent, options)
            .await
        {
            Ok(_) => Err(ignored(
                "it overwrote an existing object despite If-None-Match: *",
            )),
            Err(Failure::Precondition | Failure::Conflict) => {
                match self
                    .put_conditional(
                        &key,
                        "wrong version".into(),
                        &Expect::Etag(WRONG_ETAG.into()),
                        options,
                    )
                    .await
                {
                    Ok(_) => Err(ignored(
                        "it accepted a write whose If-Match named an ETag the object never had",
                    )),
                    Err(Failure::Precondition | Failure::Conflict) => Ok(()),
                    Err(other) => Err(fail(other)),
                }
            }
            Err(other) => Err(fail(other)),
        };
        // The probe object is ours alone; failing to delete it only leaves a few bytes behind,
        // but says which permission is missing (fenced deletes write tombstones: the fence
        // itself needs no s3:DeleteObject).
        if let Err(error) = self
            .inner
            .client
            .delete_object()
            .bucket(&self.inner.bucket)
            .key(&key)
            .send()
            .await
        {
            let failure = fail(classify(error, &self.inner.bucket));
            tracing::warn!(
                bucket = %self.inner.bucket,
                %key,
                %failure,
                "the capability probe could not delete its object (grant s3:DeleteObject on the prefix, or remove it yourself)"
            );
        }
        if result.is_ok() {
            tracing::debug!(bucket = %self.inner.bucket, "S3 endpoint enforces conditional writes");
        }
        result
    }
}
