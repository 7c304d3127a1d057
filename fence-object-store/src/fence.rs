//! `ObjectStoreFence`: the fenced object store over any `object_store` backend.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_core::raw::{pipeline, TokenBounds};
use fence_core::{
    Capabilities, Claimed, Domain, Entry, Fence, FenceError, FencedStore, FencingToken,
    InvalidInput, OpIdRetention, Operation, Snapshot, WriteOutcome, WriteRequest,
};
use fence_objects::{decide, decode, Header, KeyScheme, Known, VersionCache};
use object_store::path::Path;
use object_store::ObjectStore;
use tokio::sync::OnceCell;

use crate::error::BACKEND;
use crate::requests::Version;

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn ObjectStore>,
    pub(crate) keys: KeyScheme,
    pub(crate) max_value_bytes: usize,
    pub(crate) bounds: TokenBounds,
    pub(crate) op_id_retention: usize,
    pub(crate) max_attempts: u32,
    pub(crate) cache: VersionCache<Version>,
    pub(crate) probed: OnceCell<()>,
}

/// A fenced object store over any [`ObjectStore`]: one object per domain, whose body starts
/// with the `FENCE-S3/1` envelope holding the domain's high-water mark (the format fence-s3
/// writes, so either client reads and writes the other's objects); every write is a
/// compare-and-swap through object_store's `PutMode::Create` / `PutMode::Update`, so the token
/// check and the write are atomic at the store.
///
/// In steady state a write is ONE request: the last version and envelope seen per object are
/// cached; a stale cache costs the refused request, a read and the write again. Cheap to clone.
#[derive(Clone)]
pub struct ObjectStoreFence {
    pub(crate) inner: Arc<Inner>,
}

/// Between compare-and-swap attempts lost to concurrent writers: 10 ms doubling to 1 s.
pub(crate) const BACKOFF: fence_core::Backoff =
    fence_core::Backoff::new(Duration::from_millis(10), Duration::from_secs(1));

impl ObjectStoreFence {
    /// The object key of a domain: the prefix plus the domain's injective escaped form (the
    /// layout fence-s3 uses), or [`InvalidInput::KeyTooLong`] before any request.
    pub fn object_key(&self, domain: &Domain) -> Result<String, FenceError> {
        self.inner.keys.object(domain)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.inner.keys.prefix()
    }

    /// The store this fence writes through.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// Objects currently in the version cache, and its bound.
    pub fn cache_usage(&self) -> (usize, usize) {
        (self.inner.cache.len(), self.inner.cache.capacity())
    }

    /// The folder the prefix names (`None`: the store's root), as object_store lists.
    pub(crate) fn prefix_folder(&self) -> Option<Path> {
        crate::retire::folder_of(self.prefix())
    }

    pub(crate) fn object_path(&self, domain: &Domain) -> Result<Path, FenceError> {
        path_of(&self.object_key(domain)?)
    }

    async fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, Some(self.inner.max_value_bytes))?;
        let payload = match request.mutation() {
            fence_core::Mutation::Put(value) => value.clone(),
            fence_core::Mutation::Delete => Default::default(),
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let (bounds, retention) = (self.inner.bounds, self.inner.op_id_retention);
        let decide = |current: Option<&Header>, from_cache: bool| {
            decide::write_step(request, current, from_cache, bounds, retention)
        };
        self.conditional_update(request.domain(), request.operation(), decide, Some(payload))
            .await
    }

    async fn claim_now(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        let bounds = self.inner.bounds;
        let decide = |current: Option<&Header>, from_cache: bool| {
            decide::claim_step(domain, token, current, from_cache, bounds)
        };
        self.conditional_update(domain, Operation::Claim, decide, None)
            .await
    }

    pub(crate) async fn read_now(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        let path = self.object_path(domain)?;
        // A missing bucket reads like a missing object: the probe tells them apart.
        self.probe().await?;
        let Some(fetched) = self.fetch(&path, domain, Operation::Read, None).await? else {
            return Ok(Snapshot::new(None, Entry::Absent));
        };
        let (header, offset) = decode(BACKEND, domain, path.as_ref(), &fetched.bytes)?;
        let snapshot = decide::snapshot(&header, fetched.bytes.slice(offset..));
        self.inner.cache.insert(
            path.to_string(),
            Known {
                version: fetched.version,
                header,
            },
        );
        Ok(snapshot)
    }

    async fn hwm_now(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        let path = self.object_path(domain)?;
        self.probe().await?;
        let loaded = self
            .load_header(&path, domain, Operation::HighWaterMark)
            .await?;
        Ok(loaded.map(|(version, header)| {
            let hwm = header.hwm;
            self.inner
                .cache
                .insert(path.to_string(), Known { version, header });
            hwm
        }))
    }
}

/// An object_store path of a key the key scheme built (it never has empty, `.` or `..`
/// segments, nor control characters).
pub(crate) fn path_of(key: &str) -> Result<Path, FenceError> {
    Path::parse(key).map_err(|e| {
        InvalidInput::Configuration(format!(
            "object key `{key}` is not an object_store path: {e}"
        ))
        .into()
    })
}

impl fmt::Debug for ObjectStoreFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreFence")
            .field("store", &self.inner.store.to_string())
            .field("prefix", &self.inner.keys.prefix())
            .field("max_value_bytes", &self.inner.max_value_bytes)
            .field("cache", &self.cache_usage())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Fence for ObjectStoreFence {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(self.inner.op_id_retention))
            .with_max_value_bytes(Some(self.inner.max_value_bytes))
            // Every backend keeps objects across a server restart, except memory in the process.
            .with_survives_restart(self.inner.store.to_string() != "InMemory")
            .with_max_token_step(self.inner.bounds.max_step)
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.claim_now(domain, token).await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        self.hwm_now(domain).await
    }
}

#[async_trait]
impl FencedStore for ObjectStoreFence {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request).await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.read_now(domain).await
    }
}
