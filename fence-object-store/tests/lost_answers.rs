//! object_store resends a conditional write after some failed answers; when the first send
//! applied, the resent one is refused by it. A store that does exactly that (every
//! compare-and-swap applies, then answers `Precondition`) must see each write accepted once,
//! recognised by its nonce: not refused, and not applied twice.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::services::{domain, put, token};
use fence_core::{FencedStore, WriteOutcome};
use fence_object_store::object_store::memory::InMemory;
use fence_object_store::object_store::path::Path;
use fence_object_store::object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use fence_object_store::ObjectStoreFence;
use futures_util::stream::BoxStream;

/// InMemory whose compare-and-swap writes apply and then answer as a resent write would.
#[derive(Debug)]
struct AppliedThenRefused {
    inner: InMemory,
    refused: AtomicUsize,
}

impl fmt::Display for AppliedThenRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AppliedThenRefused({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for AppliedThenRefused {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let update = matches!(opts.mode, PutMode::Update(_));
        let applied = self.inner.put_opts(location, payload, opts).await?;
        if update && !location.as_ref().contains("!probe!") {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(fence_object_store::object_store::Error::Precondition {
                path: location.to_string(),
                source: "the resent write found the first one applied".into(),
            });
        }
        Ok(applied)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[tokio::test]
async fn a_write_refused_after_it_applied_is_recognised_by_its_nonce() {
    let store = Arc::new(AppliedThenRefused {
        inner: InMemory::new(),
        refused: AtomicUsize::new(0),
    });
    let fence = ObjectStoreFence::builder(store.clone()).build().unwrap();
    let d = domain("resent");
    put(&fence, &d, 1, "first").await.unwrap();
    for (n, value) in [(2, "second"), (3, "third")] {
        match put(&fence, &d, n, value).await {
            Ok(WriteOutcome::Accepted(accepted)) => {
                assert_eq!(accepted.token, token(n));
                assert_eq!(accepted.revision.get(), n, "applied once, not again");
            }
            other => panic!("token {n}: {other:?}"),
        }
    }
    assert_eq!(
        store.refused.load(Ordering::SeqCst),
        2,
        "both writes were refused once"
    );
    let read = fence.read(&d).await.unwrap();
    assert_eq!(read.value().map(|v| v.to_vec()), Some(b"third".to_vec()));
    assert_eq!(read.revision().map(|r| r.get()), Some(3));
}
