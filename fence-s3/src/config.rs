//! Configuration of an [`S3Fence`]: the client, the bucket and key prefix, and the limits.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::Client;
use fence_core::raw::TokenBounds;
use fence_core::{FenceError, InvalidInput, IssuerView, Observed};
use fence_objects::{
    KeyLayout, KeyScheme, VersionCache, DEFAULT_CACHE_CAPACITY, DEFAULT_MAX_KEY_BYTES,
    DEFAULT_MAX_SEGMENT_BYTES, DEFAULT_OP_ID_RETENTION, DEFAULT_PREFIX,
};
use tokio::sync::OnceCell;

use crate::error::BACKEND;
use crate::{Inner, ObjectOptions, S3Fence};

/// Default greatest payload.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 512 * 1024 * 1024;
/// Default size above which objects are written with a multipart upload.
pub const DEFAULT_MULTIPART_THRESHOLD: usize = 16 * 1024 * 1024;
/// Default multipart part size (S3's minimum is 5 MiB).
pub const DEFAULT_PART_SIZE: usize = 8 * 1024 * 1024;

/// Builds an [`S3Fence`]. `build` does no I/O; `connect` also runs the capability probe.
///
/// ```
/// use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
/// let config = aws_sdk_s3::Config::builder()
///     .behavior_version(BehaviorVersion::latest())
///     .region(Region::new("us-east-1"))
///     .endpoint_url("http://127.0.0.1:8333") // an S3-compatible server; omit for AWS
///     .force_path_style(true)
///     .credentials_provider(Credentials::new("access", "secret", None, None, "example"))
///     .build();
/// let fence = fence_s3::S3Fence::builder()
///     .client(aws_sdk_s3::Client::from_conf(config))
///     .bucket("reports")
///     .prefix("fenced/")
///     .build()?;
/// assert_eq!(fence.object_key(&fence_core::Domain::new("q3 report")?)?, "fenced/q3%20report");
/// # Ok::<(), fence_core::FenceError>(())
/// ```
pub struct S3FenceBuilder {
    client: Option<Client>,
    bucket: Option<String>,
    prefix: String,
    layout: KeyLayout,
    object_options: ObjectOptions,
    max_value_bytes: usize,
    multipart_threshold: usize,
    part_size: usize,
    cache_capacity: usize,
    op_id_retention: usize,
    max_attempts: usize,
    max_key_bytes: usize,
    max_segment_bytes: usize,
    max_token_step: Option<NonZeroU64>,
}

impl Default for S3FenceBuilder {
    fn default() -> Self {
        S3FenceBuilder {
            client: None,
            bucket: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            layout: KeyLayout::default(),
            object_options: ObjectOptions::default(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            multipart_threshold: DEFAULT_MULTIPART_THRESHOLD,
            part_size: DEFAULT_PART_SIZE,
            cache_capacity: DEFAULT_CACHE_CAPACITY,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            max_token_step: None,
            max_attempts: 20,
        }
    }
}

impl S3Fence {
    /// A builder.
    pub fn builder() -> S3FenceBuilder {
        S3FenceBuilder::default()
    }
}

impl S3FenceBuilder {
    /// The S3 client. Its automatic retries are turned off for Fence's requests: a conditional
    /// write resent after a timeout could apply twice, so Fence retries itself, and reports an
    /// unknown outcome as ambiguous.
    pub fn client(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    /// A client from an `SdkConfig` (your usual AWS configuration chain).
    pub fn sdk_config(self, config: &aws_types::SdkConfig) -> Self {
        self.client(Client::new(config))
    }

    /// The bucket holding fenced objects.
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.bucket = Some(bucket.into());
        self
    }

    /// The key prefix of fenced objects (default [`DEFAULT_PREFIX`]). Must be empty or end with
    /// `/` (refused by `build` otherwise), so that no two prefixes and domains name the same
    /// object; the crate docs state the whole key layout.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How a domain becomes the key after the prefix (default [`KeyLayout::Escaped`]: one
    /// escaped segment). [`KeyLayout::Verbatim`] keeps the domain as written, `/` included, to
    /// fence an existing layout in place (`sales/2026/part-0.csv`); the crate docs state which
    /// domains it refuses.
    pub fn key_layout(mut self, layout: KeyLayout) -> Self {
        self.layout = layout;
        self
    }

    /// The options every write sends unless it brings its own ([`S3Fence::write_with`]):
    /// content type, cache control, user metadata, tags, server-side encryption. The capability
    /// probe's objects are written with them too, so a bucket policy that requires encryption
    /// holds for every PUT. Checked by `build`.
    pub fn object_options(mut self, options: ObjectOptions) -> Self {
        self.object_options = options;
        self
    }

    /// The longest object key (default [`DEFAULT_MAX_KEY_BYTES`], AWS's limit) and the longest
    /// segment between two `/` (default [`DEFAULT_MAX_SEGMENT_BYTES`], the limit of
    /// filesystem-backed servers) the endpoint accepts. A domain whose key would exceed either
    /// is refused with [`InvalidInput::KeyTooLong`] before any request.
    pub fn key_limits(mut self, max_key_bytes: usize, max_segment_bytes: usize) -> Self {
        self.max_key_bytes = max_key_bytes;
        self.max_segment_bytes = max_segment_bytes;
        self
    }

    /// How many conditional writes one operation may lose when concurrent writers keep winning
    /// (default 20). A lost one is read and decided again (after a backoff when S3 answered 409
    /// or 503; at once after a 412). Past the limit the state read then is still decided, and a
    /// write still due fails with [`S3FenceError::TooManyConflicts`] (class `Contention`, not
    /// retryable as is), or as throttled (`Unavailable`) when the last refusal was a 503.
    ///
    /// [`S3FenceError::TooManyConflicts`]: crate::S3FenceError::TooManyConflicts
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Refuses tokens more than `max_step` above a domain's mark with
    /// [`fence_core::FenceError::TokenTooFar`] (see [`fence_core::raw::TokenBounds`]). The check runs
    /// in this client between the read and the conditional write: it stops runaway tokens of
    /// callers that go through Fence, while only the bucket's IAM policy stops a caller that
    /// writes the object directly (see the crate docs on forged tokens).
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.max_token_step = Some(max_step);
        self
    }

    /// Refuses larger payloads before any I/O.
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// Objects above this size are written with a multipart upload.
    pub fn multipart_threshold(mut self, bytes: usize) -> Self {
        self.multipart_threshold = bytes;
        self
    }

    /// The multipart part size (at least 5 MiB).
    pub fn part_size(mut self, bytes: usize) -> Self {
        self.part_size = bytes;
        self
    }

    /// How many objects' last ETag and header are cached (0 turns the cache off: every write
    /// then reads first).
    pub fn cache_capacity(mut self, objects: usize) -> Self {
        self.cache_capacity = objects;
        self
    }

    /// How many operation ids each object remembers (at most [`MAX_OP_ID_RETENTION`](crate::MAX_OP_ID_RETENTION)).
    pub fn op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// Validates the configuration and builds the fence with no I/O. The capability probe runs
    /// before the first write (or in [`S3FenceBuilder::connect`]).
    ///
    /// The fence comes inside the telemetry layer ([`Observed`]).
    pub fn build(self) -> Result<Observed<S3Fence>, FenceError> {
        let invalid = |why: String| -> FenceError { InvalidInput::Configuration(why).into() };
        let client = self
            .client
            .ok_or_else(|| invalid("no S3 client: call client() or sdk_config()".into()))?;
        let bucket = self
            .bucket
            .ok_or_else(|| invalid("no bucket: call bucket()".into()))?;
        if bucket.is_empty() || bucket.len() > 63 {
            return Err(invalid(format!(
                "bucket name `{bucket}` must be 1 to 63 characters"
            )));
        }
        let keys = KeyScheme::new(
            BACKEND,
            self.prefix,
            self.layout,
            self.max_key_bytes,
            self.max_segment_bytes,
        )?;
        if let Some(why) = self.object_options.fenced_problem() {
            return Err(invalid(format!("default object options: {why}")));
        }
        if self.part_size < 5 * 1024 * 1024 {
            return Err(invalid(format!(
                "part size {} is below S3's 5 MiB minimum",
                self.part_size
            )));
        }
        if self.multipart_threshold < self.part_size {
            return Err(invalid(
                "multipart threshold must be at least the part size".into(),
            ));
        }
        fence_objects::settings::check_limits(
            u64::try_from(self.max_attempts).unwrap_or(u64::MAX),
            self.max_value_bytes,
            self.op_id_retention,
        )?;
        let client = Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_config(RetryConfig::disabled())
                .build(),
        );
        Ok(Observed::new(S3Fence {
            inner: Arc::new(Inner {
                client,
                bucket,
                keys,
                object_options: self.object_options,
                max_value_bytes: self.max_value_bytes,
                bounds: TokenBounds::new(self.max_token_step, IssuerView::Unchecked),
                multipart_threshold: self.multipart_threshold,
                part_size: self.part_size,
                op_id_retention: self.op_id_retention,
                max_attempts: self.max_attempts,
                cache: VersionCache::new(self.cache_capacity),
                probed: OnceCell::new(),
            }),
        }))
    }

    /// Builds the fence and runs the capability probe, so that an endpoint that ignores
    /// conditional writes, a missing bucket or bad credentials fail here.
    pub async fn connect(self) -> Result<Observed<S3Fence>, FenceError> {
        let fence = self.build()?;
        fence.probe().await?;
        Ok(fence)
    }
}

impl fmt::Debug for S3FenceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3FenceBuilder")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("multipart_threshold", &self.multipart_threshold)
            .field("cache_capacity", &self.cache_capacity)
            .finish_non_exhaustive()
    }
}
