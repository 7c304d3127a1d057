//! The capability probe: a backend that cannot compare-and-swap, or ignores the condition,
//! cannot fence anything.

use bytes::Bytes;
use fence_core::{Domain, FenceError, Operation};
use fence_objects::fresh_nonce;
use object_store::{ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use crate::error::{backend_error, store_error, ObjectStoreFenceError};
use crate::fence::path_of;
use crate::ObjectStoreFence;

/// A version no object has: an ETag for the backends that compare ETags, a generation for
/// Google Cloud Storage (its generations are microsecond timestamps, never 1).
fn wrong_version() -> UpdateVersion {
    UpdateVersion {
        e_tag: Some("\"00000000000000000000000000000000\"".into()),
        version: Some("1".into()),
    }
}

impl ObjectStoreFence {
    /// Checks once that the backend refuses a create over an existing object and a
    /// compare-and-swap that names a version the object does not have, by writing a probe
    /// object under the prefix (`<prefix>!probe!<nonce>`, deleted afterwards). Runs before the
    /// first write, or in [`crate::ObjectStoreFenceBuilder::connect`]. A backend without
    /// compare-and-swap (object_store's `LocalFileSystem`) is refused with
    /// [`ObjectStoreFenceError::ConditionsUnsupported`], one that accepts a false condition
    /// with [`ObjectStoreFenceError::ConditionsIgnored`].
    pub async fn probe(&self) -> Result<(), FenceError> {
        self.inner
            .probed
            .get_or_try_init(|| self.run_probe())
            .await
            .map(|_| ())
    }

    async fn run_probe(&self) -> Result<(), FenceError> {
        let store = &self.inner.store;
        let path = path_of(&self.inner.keys.probe(fresh_nonce()))?;
        let domain = Domain::new("fence-capability-probe")?;
        let put = |mode: PutMode, body: &'static str| {
            store.put_opts(
                &path,
                Bytes::from_static(body.as_bytes()).into(),
                PutOptions::from(mode),
            )
        };
        let refuse = |error: ObjectStoreFenceError| backend_error(None, error);
        let unsupported = |detail: String| {
            refuse(ObjectStoreFenceError::ConditionsUnsupported {
                store: store.to_string(),
                detail,
            })
        };
        let ignored = |detail: &str| {
            refuse(ObjectStoreFenceError::ConditionsIgnored {
                store: store.to_string(),
                detail: detail.to_owned(),
            })
        };
        let failed = |error| store_error(error, &domain, Operation::Write, false);
        let created = match put(PutMode::Create, "probe").await {
            Ok(created) => created,
            Err(object_store::Error::NotImplemented { operation, .. }) => {
                return Err(unsupported(format!("{operation} is not implemented")))
            }
            Err(error) => return Err(failed(error)),
        };
        // A compare-and-swap naming the version just written must apply: the store returns
        // what it compares (an ETag, or Google Cloud Storage's generation).
        match put(PutMode::Update(UpdateVersion::from(created)), "updated").await {
            Ok(_) => {}
            Err(object_store::Error::NotImplemented { operation, .. }) => {
                return Err(unsupported(format!(
                    "{operation} is not implemented: it can create an object only if absent, but not replace it only if unchanged"
                )))
            }
            Err(error) => {
                return Err(unsupported(format!(
                    "a write naming the version it had just returned was refused ({error})"
                )))
            }
        }
        let result = match put(PutMode::Create, "create again").await {
            Ok(_) => Err(ignored(
                "it overwrote an existing object on a create-only write",
            )),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => match put(PutMode::Update(wrong_version()), "wrong version").await {
                Ok(_) => Err(ignored(
                    "it accepted a write conditioned on a version the object never had",
                )),
                Err(
                    object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. },
                ) => Ok(()),
                Err(error) => Err(failed(error)),
            },
            Err(object_store::Error::NotImplemented { operation, .. }) => {
                Err(unsupported(format!("{operation} is not implemented")))
            }
            Err(error) => Err(failed(error)),
        };
        // The probe object is ours alone; failing to delete it only leaves a few bytes behind.
        if let Err(error) = store.delete(&path).await {
            tracing::warn!(store = %store, %path, %error, "the capability probe could not delete its object");
        }
        if result.is_ok() {
            tracing::debug!(store = %store, "the object store enforces conditional writes");
        }
        result
    }
}
