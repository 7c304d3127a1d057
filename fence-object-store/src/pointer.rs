//! The commit-pointer pattern for state across many objects.
//!
//! A store cannot update two objects atomically, so Fence fences per object. State spread over
//! many objects is written as immutable objects (create-only, never overwritten) plus ONE
//! fenced pointer, the domain's object, whose value is a [`Manifest`](crate::Manifest) of their keys. A stale
//! writer can still create objects, but no pointer will ever name them: only the pointer write
//! is fenced, and readers follow the pointer. The objects carry no envelope, so plain readers
//! (DataFusion, Spark, object_store without Fence) read them as they are.

use bytes::Bytes;
use fence_core::raw::{observe, pipeline};
use fence_core::{Domain, FenceError, Operation};
use fence_objects::{Immutable, Resolved};
use object_store::Attributes;

use crate::error::{store_error, BACKEND};
use crate::fence::path_of;
use crate::requests::PutFailure;
use crate::ObjectStoreFence;

impl ObjectStoreFence {
    /// The key of immutable object `name` of `domain` (`name` follows the rules of a domain
    /// name); an invalid or overlong name is [`FenceError::InvalidInput`].
    pub fn immutable_key(&self, domain: &Domain, name: &str) -> Result<String, FenceError> {
        self.inner.keys.data(domain, name)
    }

    /// Creates immutable object `name` of `domain` under the fence's prefix (create-only: an
    /// existing one is never overwritten). Name it in the domain's fenced [`Manifest`](crate::Manifest).
    pub async fn put_immutable(
        &self,
        domain: &Domain,
        name: &str,
        bytes: Bytes,
    ) -> Result<Immutable, FenceError> {
        observe(BACKEND, Operation::Write, domain, None, async {
            let key = self.immutable_key(domain, name)?;
            pipeline::check_size(domain, bytes.len(), Some(self.inner.max_value_bytes))?;
            self.create_only(key, bytes, domain).await
        })
        .await
    }

    /// Creates a plain object at exactly `key` (create-only: an existing object is never
    /// overwritten), with no envelope, so that any reader sees its bytes as written: a table's
    /// data file beside its other files. `key` must lie outside what this fence owns (its
    /// prefix's domain objects); name it in a [`Manifest`](crate::Manifest) that a fenced write commits, and
    /// readers resolve it with [`ObjectStoreFence::resolve`]. `domain` names the owner in errors
    /// and telemetry.
    pub async fn put_plain(
        &self,
        domain: &Domain,
        key: &str,
        bytes: Bytes,
    ) -> Result<Immutable, FenceError> {
        observe(BACKEND, Operation::Write, domain, None, async {
            self.inner.keys.plain(key)?;
            pipeline::check_size(domain, bytes.len(), Some(self.inner.max_value_bytes))?;
            self.create_only(key.to_owned(), bytes, domain).await
        })
        .await
    }

    async fn create_only(
        &self,
        key: String,
        bytes: Bytes,
        domain: &Domain,
    ) -> Result<Immutable, FenceError> {
        let path = path_of(&key)?;
        self.probe().await?;
        match self
            .put_conditional(&path, bytes, Attributes::new(), None)
            .await
        {
            Ok(_) => Ok(Immutable::Created(key)),
            Err(PutFailure::Lost) => Ok(Immutable::AlreadyExists(key)),
            Err(PutFailure::Failed(error)) => {
                Err(store_error(error, domain, Operation::Write, true))
            }
        }
    }

    /// Reads the domain's fenced [`Manifest`](crate::Manifest): the keys of the objects that the last accepted
    /// write committed, with that write's token and revision. `None` when the domain holds no
    /// value; a value that is not a manifest is [`FenceError::CorruptState`].
    pub async fn resolve(&self, domain: &Domain) -> Result<Option<Resolved>, FenceError> {
        // Traced and counted as a read.
        let snapshot = observe(
            BACKEND,
            Operation::Read,
            domain,
            None,
            self.read_now(domain),
        )
        .await?;
        fence_objects::resolved(BACKEND, domain, &snapshot)
    }

    /// Reads immutable object `name` of `domain`; `None` when there is none.
    pub async fn get_immutable(
        &self,
        domain: &Domain,
        name: &str,
    ) -> Result<Option<Bytes>, FenceError> {
        let path = path_of(&self.immutable_key(domain, name)?)?;
        let fetched = self.fetch(&path, domain, Operation::Read, None).await?;
        Ok(fetched.map(|fetched| fetched.bytes))
    }
}
