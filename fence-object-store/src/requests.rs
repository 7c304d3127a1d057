//! The requests Fence makes through `object_store`: read a header, read an object, write one
//! conditionally.

use bytes::Bytes;
use fence_core::{Domain, FenceError, Operation};
use fence_objects::{decode, Header, MAX_HEADER_BYTES};
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetRange, ObjectMeta, ObjectStoreExt, PutMode, PutOptions,
    UpdateVersion,
};

use crate::error::{backend_error, store_error, ObjectStoreFenceError, BACKEND};
use crate::ObjectStoreFence;

/// An object's version as the backend reports it: the ETag (S3, Azure, memory) and the
/// generation (Google Cloud Storage). A conditional write names both; each backend compares
/// the one it keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    e_tag: Option<String>,
    version: Option<String>,
}

impl Version {
    fn new(e_tag: Option<String>, version: Option<String>) -> Option<Self> {
        (e_tag.is_some() || version.is_some()).then_some(Version { e_tag, version })
    }

    fn update(&self) -> UpdateVersion {
        UpdateVersion {
            e_tag: self.e_tag.clone(),
            version: self.version.clone(),
        }
    }
}

/// An object as read: its version, bytes and attributes (content type, cache control, user
/// metadata and the like, as object_store reports them).
pub(crate) struct Fetched {
    pub(crate) version: Version,
    pub(crate) bytes: Bytes,
    pub(crate) attributes: Attributes,
}

/// Why a conditional write was not applied.
pub(crate) enum PutFailure {
    /// The object is not the version the write named (or exists, for a create).
    Lost,
    /// Any other failure of the request.
    Failed(object_store::Error),
}

impl ObjectStoreFence {
    fn version_of(&self, meta: &ObjectMeta, domain: &Domain) -> Result<Version, FenceError> {
        Version::new(meta.e_tag.clone(), meta.version.clone()).ok_or_else(|| {
            backend_error(
                Some(domain),
                ObjectStoreFenceError::NoVersion {
                    store: self.inner.store.to_string(),
                    path: meta.location.to_string(),
                },
            )
        })
    }

    /// The object's version, bytes (only the first `range` bytes when given) and attributes;
    /// `None` when it does not exist.
    pub(crate) async fn fetch(
        &self,
        path: &Path,
        domain: &Domain,
        operation: Operation,
        range: Option<usize>,
    ) -> Result<Option<Fetched>, FenceError> {
        let options = GetOptions {
            range: range.map(|end| GetRange::Bounded(0..end as u64)),
            ..GetOptions::default()
        };
        let got = match self.inner.store.get_opts(path, options).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(error) if range.is_some() => {
                // A range of an empty object is unsatisfiable: read it whole (it is foreign
                // state). Any other failure is what it says.
                return match self.inner.store.head(path).await {
                    Ok(meta) if meta.size == 0 => {
                        Box::pin(self.fetch(path, domain, operation, None)).await
                    }
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    _ => Err(store_error(error, domain, operation, false)),
                };
            }
            Err(error) => return Err(store_error(error, domain, operation, false)),
        };
        let version = self.version_of(&got.meta, domain)?;
        let attributes = got.attributes.clone();
        let bytes = got
            .bytes()
            .await
            .map_err(|error| store_error(error, domain, operation, false))?;
        Ok(Some(Fetched {
            version,
            bytes,
            attributes,
        }))
    }

    /// The object's version and envelope header (`None`: no object), from a read of its first
    /// [`MAX_HEADER_BYTES`].
    pub(crate) async fn load_header(
        &self,
        path: &Path,
        domain: &Domain,
        operation: Operation,
    ) -> Result<Option<(Version, Header)>, FenceError> {
        let Some(fetched) = self
            .fetch(path, domain, operation, Some(MAX_HEADER_BYTES))
            .await?
        else {
            return Ok(None);
        };
        let (header, _) = decode(BACKEND, domain, path.as_ref(), &fetched.bytes)?;
        Ok(Some((fetched.version, header)))
    }

    /// Writes `body` with `attributes` at `path` if the object is still `expected` (`None`: if
    /// it does not exist); the new version, if the backend reported one.
    pub(crate) async fn put_conditional(
        &self,
        path: &Path,
        body: Bytes,
        attributes: Attributes,
        expected: Option<&Version>,
    ) -> Result<Option<Version>, PutFailure> {
        let mode = match expected {
            Some(version) => PutMode::Update(version.update()),
            None => PutMode::Create,
        };
        match self
            .inner
            .store
            .put_opts(
                path,
                body.into(),
                PutOptions {
                    mode,
                    attributes,
                    ..PutOptions::default()
                },
            )
            .await
        {
            // Applied; `None` when the backend reported no version to compare with next.
            Ok(put) => Ok(Version::new(put.e_tag, put.version)),
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. },
            ) => Err(PutFailure::Lost),
            // The object named was deleted meanwhile; on a create, the bucket or container is
            // missing, which no retry mends.
            Err(object_store::Error::NotFound { .. }) if expected.is_some() => {
                Err(PutFailure::Lost)
            }
            Err(error) => Err(PutFailure::Failed(error)),
        }
    }
}
