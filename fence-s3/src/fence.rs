//! `S3Fence`: the fenced object store.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use fence_core::raw::pipeline;
use fence_core::raw::TokenBounds;
use fence_core::{
    Capabilities, Claimed, Domain, Entry, Fence, FenceError, FencedStore, FencingToken, Mutation,
    OpIdRetention, Operation, Snapshot, WriteOutcome, WriteRequest,
};
use tokio::sync::OnceCell;

use crate::error::BACKEND;
use crate::options::ObjectOptions;
use fence_objects::KeyScheme;
use fence_objects::{decide, decode, Header};
use fence_objects::{Known, VersionCache};

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) bucket: String,
    pub(crate) keys: KeyScheme,
    pub(crate) object_options: ObjectOptions,
    pub(crate) max_value_bytes: usize,
    pub(crate) bounds: TokenBounds,
    pub(crate) multipart_threshold: usize,
    pub(crate) part_size: usize,
    pub(crate) op_id_retention: usize,
    pub(crate) max_attempts: usize,
    pub(crate) cache: VersionCache<String>,
    pub(crate) probed: OnceCell<()>,
}

/// A fenced object store on S3: one object per domain, whose body starts with a small envelope
/// holding the domain's high-water mark; every write is a compare-and-set (`If-Match` on the
/// ETag read, `If-None-Match: *` when absent), so the token check and the write are atomic.
///
/// In steady state a write is ONE request: the last ETag and envelope seen per object are
/// cached, and a stale cache costs one extra read when S3 answers 412. Cheap to clone.
///
/// ```no_run
/// use fence_core::{Domain, Fence, FencedStore, FencingToken, WriteRequest};
/// use fence_s3::S3Fence;
/// # async fn run() -> Result<(), fence_core::FenceError> {
/// let config = fence_s3::aws_sdk_s3::config::Builder::new().build(); // or `aws_config::load_defaults`
/// let fence = S3Fence::builder()
///     .client(fence_s3::aws_sdk_s3::Client::from_conf(config))
///     .bucket("reports")
///     .connect() // probes the bucket for the conditional writes the fence relies on
///     .await?;
/// let report = Domain::new("reports/2026-q3")?;
/// let token = FencingToken::new(42)?; // from the lease service of your choice
/// fence.claim(&report, token).await?;
/// fence.write(&WriteRequest::put(report.clone(), token, "q3 figures")).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct S3Fence {
    pub(crate) inner: Arc<Inner>,
}

/// Between compare-and-set attempts lost to conflicts or throttling: 10 ms doubling to 1 s.
pub(crate) const BACKOFF: fence_core::Backoff =
    fence_core::Backoff::new(Duration::from_millis(10), Duration::from_secs(1));

impl S3Fence {
    /// The object key of a domain: the prefix plus the domain's injective escaped form (the
    /// crate docs state the layout), or [`fence_core::InvalidInput::KeyTooLong`] when the endpoint could
    /// not store it.
    pub fn object_key(&self, domain: &Domain) -> Result<String, FenceError> {
        self.inner.keys.object(domain)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.inner.keys.prefix()
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// Objects currently in the ETag cache, and its bound.
    pub fn cache_usage(&self) -> (usize, usize) {
        (self.inner.cache.len(), self.inner.cache.capacity())
    }

    pub(crate) async fn backoff(&self, attempt: usize) {
        let attempt = u32::try_from(attempt).unwrap_or(u32::MAX);
        tokio::time::sleep(BACKOFF.delay(attempt)).await;
    }

    /// Writes like [`FencedStore::write`], with this write's own object options instead of
    /// the builder's ([`crate::S3FenceBuilder::object_options`]); invalid options are refused
    /// before any request.
    ///
    /// ```no_run
    /// # async fn demo(fence: fence_s3::S3Fence) -> Result<(), fence_core::FenceError> {
    /// use fence_core::{Domain, FencingToken, WriteRequest};
    /// use fence_s3::ObjectOptions;
    /// let request = WriteRequest::put(Domain::new("reports/q3.csv")?, FencingToken::new(7)?, "a,b\n1,2\n");
    /// let csv = ObjectOptions::new().content_type("text/csv").metadata("source", "erp");
    /// fence.write_with(&request, &csv).await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_with(
        &self,
        request: &WriteRequest,
        options: &ObjectOptions,
    ) -> Result<WriteOutcome, FenceError> {
        fence_core::raw::observe(
            BACKEND,
            request.operation(),
            request.domain(),
            Some(request.token()),
            async {
                if let Some(why) = options.fenced_problem() {
                    return Err(fence_core::InvalidInput::Configuration(format!(
                        "write to domain `{}`: {why}",
                        request.domain()
                    ))
                    .into());
                }
                self.write_now(request, options).await
            },
        )
        .await
    }

    async fn write_now(
        &self,
        request: &WriteRequest,
        options: &ObjectOptions,
    ) -> Result<WriteOutcome, FenceError> {
        pipeline::validate_write(request, Some(self.inner.max_value_bytes))?;
        let value = match request.mutation() {
            Mutation::Put(value) => Some(value.clone()),
            Mutation::Delete => None,
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let (bounds, retention) = (self.inner.bounds, self.inner.op_id_retention);
        let decide = |current: Option<&Header>, from_cache: bool| {
            decide::write_step(request, current, from_cache, bounds, retention)
        };
        let payload = value.clone().unwrap_or_default();
        self.conditional_update(
            request.domain(),
            request.operation(),
            decide,
            Some((payload, options)),
        )
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
        let key = self.object_key(domain)?;
        let Some(fetched) = self.fetch(&key, domain, Operation::Read, None).await? else {
            return Ok(Snapshot::new(None, Entry::Absent));
        };
        let (header, offset) = decode(BACKEND, domain, &key, &fetched.bytes)?;
        let snapshot = decide::snapshot(&header, fetched.bytes.slice(offset..));
        self.inner.cache.insert(
            key.clone(),
            Known {
                version: fetched.etag,
                header,
            },
        );
        Ok(snapshot)
    }

    async fn hwm_now(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        let key = self.object_key(domain)?;
        let loaded = self
            .load_header(&key, domain, Operation::HighWaterMark)
            .await?;
        Ok(loaded.map(|(etag, header)| {
            let hwm = header.hwm;
            self.inner.cache.insert(
                key.clone(),
                Known {
                    version: etag,
                    header,
                },
            );
            hwm
        }))
    }
}

impl fmt::Debug for S3Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Fence")
            .field("bucket", &self.inner.bucket)
            .field("prefix", &self.inner.keys.prefix())
            .field("max_value_bytes", &self.inner.max_value_bytes)
            .field("cache", &self.cache_usage())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Fence for S3Fence {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let retention = OpIdRetention::per_domain(self.inner.op_id_retention);
        Capabilities::store()
            .with_op_id_retention(retention)
            .with_max_value_bytes(Some(self.inner.max_value_bytes))
            .with_survives_restart(true)
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
impl FencedStore for S3Fence {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request, &self.inner.object_options).await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.read_now(domain).await
    }
}
