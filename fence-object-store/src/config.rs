//! The builder: validated configuration, no I/O until `connect` or the first write.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use fence_core::raw::TokenBounds;
use fence_core::{FenceError, InvalidInput, IssuerView, Observed};
use fence_objects::{
    KeyLayout, KeyScheme, VersionCache, DEFAULT_CACHE_CAPACITY, DEFAULT_MAX_KEY_BYTES,
    DEFAULT_MAX_SEGMENT_BYTES, DEFAULT_OP_ID_RETENTION, DEFAULT_PREFIX,
};
use object_store::ObjectStore;
use tokio::sync::OnceCell;

use crate::error::BACKEND;
use crate::fence::Inner;
use crate::ObjectStoreFence;

/// Default greatest payload (a fenced object is read and written whole).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 64 * 1024 * 1024;
/// Default compare-and-swap attempts lost to concurrent writers before giving up.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 32;

/// Configures an [`ObjectStoreFence`] over the caller's own [`ObjectStore`].
///
/// ```
/// use std::sync::Arc;
/// use fence_core::{Domain, FencedStore, FencingToken, WriteRequest};
/// use fence_object_store::ObjectStoreFence;
/// use object_store::memory::InMemory;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let fence = ObjectStoreFence::builder(Arc::new(InMemory::new())).prefix("tables/").connect().await?;
/// let commit = WriteRequest::put(Domain::new("orders/_pointer")?, FencingToken::new(7)?, "v12");
/// fence.write(&commit).await?;
/// let stale = WriteRequest::put(Domain::new("orders/_pointer")?, FencingToken::new(6)?, "v11");
/// assert!(fence.write(&stale).await.is_err());
/// # Ok::<(), fence_core::FenceError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct ObjectStoreFenceBuilder {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    layout: KeyLayout,
    max_key_bytes: usize,
    max_segment_bytes: usize,
    max_value_bytes: usize,
    op_id_retention: usize,
    max_token_step: Option<NonZeroU64>,
    cache_capacity: usize,
    max_attempts: u32,
}

impl ObjectStoreFence {
    /// A builder over `store`, configured as you already configure it (object_store's own
    /// builders, credentials and client options).
    pub fn builder(store: Arc<dyn ObjectStore>) -> ObjectStoreFenceBuilder {
        ObjectStoreFenceBuilder {
            store,
            prefix: DEFAULT_PREFIX.to_owned(),
            layout: KeyLayout::Escaped,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            max_segment_bytes: DEFAULT_MAX_SEGMENT_BYTES,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            op_id_retention: DEFAULT_OP_ID_RETENTION,
            max_token_step: None,
            cache_capacity: DEFAULT_CACHE_CAPACITY,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

impl ObjectStoreFenceBuilder {
    /// The key prefix of fenced objects (default [`DEFAULT_PREFIX`]): empty or ending with `/`,
    /// not starting with `/` and without empty segments (object_store paths have none), so that
    /// a key names the same object here and in fence-s3.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How a domain becomes the key after the prefix (default [`KeyLayout::Escaped`]).
    pub fn key_layout(mut self, layout: KeyLayout) -> Self {
        self.layout = layout;
        self
    }

    /// The backend's key limits: a whole key and one segment between `/` (defaults: 1,024 and
    /// 255 bytes, what S3 and filesystem-backed servers accept). Longer keys are refused before
    /// any request.
    pub fn key_limits(mut self, max_key_bytes: usize, max_segment_bytes: usize) -> Self {
        self.max_key_bytes = max_key_bytes;
        self.max_segment_bytes = max_segment_bytes;
        self
    }

    /// Refuses larger payloads before any I/O (default [`DEFAULT_MAX_VALUE_BYTES`]).
    pub fn max_value_bytes(mut self, max: usize) -> Self {
        self.max_value_bytes = max;
        self
    }

    /// How many operation ids each object remembers (at most [`MAX_OP_ID_RETENTION`](crate::MAX_OP_ID_RETENTION)).
    pub fn op_id_retention(mut self, count: usize) -> Self {
        self.op_id_retention = count;
        self
    }

    /// Refuses tokens more than `max_step` above a domain's mark with
    /// [`FenceError::TokenTooFar`] (see [`fence_core::raw::TokenBounds`]), checked in this
    /// client between the read and the conditional write.
    pub fn max_token_step(mut self, max_step: NonZeroU64) -> Self {
        self.max_token_step = Some(max_step);
        self
    }

    /// How many objects' last version and header are cached (default
    /// [`DEFAULT_CACHE_CAPACITY`]); a cached object's write is one request.
    pub fn cache_capacity(mut self, objects: usize) -> Self {
        self.cache_capacity = objects;
        self
    }

    /// Compare-and-swap attempts lost to concurrent writers before a write fails with
    /// contention (default [`DEFAULT_MAX_ATTEMPTS`]).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Validates the configuration and builds the fence with no I/O; the capability probe
    /// runs before the first write (or in [`ObjectStoreFenceBuilder::connect`]). The fence
    /// comes inside the telemetry layer ([`Observed`]).
    pub fn build(self) -> Result<Observed<ObjectStoreFence>, FenceError> {
        let invalid = |why: String| -> FenceError { InvalidInput::Configuration(why).into() };
        let odd_segment = self
            .prefix
            .trim_end_matches('/')
            .split('/')
            .any(|segment| matches!(segment, "." | ".."));
        if self.prefix.starts_with('/') || self.prefix.contains("//") || odd_segment {
            return Err(invalid(format!(
                "key prefix `{}` must not start with `/` or hold an empty, `.` or `..` segment: object_store paths have none",
                self.prefix.escape_debug()
            )));
        }
        let keys = KeyScheme::new(
            BACKEND,
            self.prefix,
            self.layout,
            self.max_key_bytes,
            self.max_segment_bytes,
        )?;
        fence_objects::settings::check_limits(
            self.max_attempts.into(),
            self.max_value_bytes,
            self.op_id_retention,
        )?;
        Ok(Observed::new(ObjectStoreFence {
            inner: Arc::new(Inner {
                store: self.store,
                keys,
                max_value_bytes: self.max_value_bytes,
                bounds: TokenBounds::new(self.max_token_step, IssuerView::Unchecked),
                op_id_retention: self.op_id_retention,
                max_attempts: self.max_attempts,
                cache: VersionCache::new(self.cache_capacity),
                probed: OnceCell::new(),
            }),
        }))
    }

    /// Builds the fence and runs the capability probe, so that a backend without
    /// compare-and-swap, one that ignores conditions, or bad credentials fail here.
    pub async fn connect(self) -> Result<Observed<ObjectStoreFence>, FenceError> {
        let fence = self.build()?;
        fence.probe().await?;
        Ok(fence)
    }
}

impl fmt::Debug for ObjectStoreFenceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStoreFenceBuilder")
            .field("store", &self.store.to_string())
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("cache_capacity", &self.cache_capacity)
            .finish_non_exhaustive()
    }
}
