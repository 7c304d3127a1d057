//! What the tests share: object_store clients of the test servers, a conformance harness over
//! any of them, and state damage going around Fence.
#![allow(dead_code, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{NotApplicable, StatePart, StoreHarness};
use fence_core::{BoxError, Domain, FencedStore, Observed};
use fence_object_store::object_store::aws::AmazonS3Builder;
use fence_object_store::object_store::path::Path;
use fence_object_store::object_store::{ObjectStore, ObjectStoreExt};
use fence_object_store::ObjectStoreFence;
use fence_testkit::s3 as s3_support;

/// object_store's S3 client of the test bucket on the test SeaweedFS at `endpoint`.
pub(crate) fn amazon(endpoint: &str) -> Arc<dyn ObjectStore> {
    amazon_with_keys(endpoint, s3_support::ACCESS_KEY, s3_support::SECRET_KEY)
}

/// object_store's S3 client of the test bucket at `endpoint`, with these keys.
pub(crate) fn amazon_with_keys(endpoint: &str, access: &str, secret: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_bucket_name(s3_support::BUCKET)
            .with_region("us-east-1")
            .with_access_key_id(access)
            .with_secret_access_key(secret)
            .build()
            .expect("an S3 client"),
    )
}

/// object_store's Azure Blob client of Azurite's test container at `endpoint` (the account URL).
pub(crate) fn azure(endpoint: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        fence_testkit::azurite::azure_builder(endpoint)
            .build()
            .expect("an Azure Blob client"),
    )
}

/// A fence over `store` with the suite's value limit.
pub(crate) fn fence(store: Arc<dyn ObjectStore>, prefix: &str) -> Observed<ObjectStoreFence> {
    ObjectStoreFence::builder(store)
        .prefix(prefix)
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid configuration")
}

/// Damages one line of the envelope of the object at `key`, going around Fence.
pub(crate) async fn corrupt(
    store: &dyn ObjectStore,
    key: &str,
    part: StatePart,
) -> Result<bool, BoxError> {
    let path = Path::parse(key)?;
    let object = store.get(&path).await?.bytes().await?;
    let Some(damaged) = fence_testkit::envelope::damage(&object, part)? else {
        return Ok(false);
    };
    store.put(&path, damaged.into()).await?;
    Ok(true)
}

/// A conformance harness: a fence over a store, another holder's fence over a fresh client of
/// the same backend (its own version cache), and what restarts the backend.
pub(crate) struct Harness {
    pub(crate) fence: Mutex<Observed<ObjectStoreFence>>,
    pub(crate) holder: Box<dyn Fn() -> Observed<ObjectStoreFence> + Send + Sync>,
    pub(crate) restart: Option<Box<dyn Fn() -> Restart + Send + Sync>>,
    pub(crate) not_applicable: NotApplicable,
    pub(crate) race_writers: usize,
    pub(crate) race_rounds: usize,
}

/// Restarts the backend and gives the fence to go on with.
pub(crate) type Restart = Pin<Box<dyn Future<Output = Observed<ObjectStoreFence>> + Send>>;

#[async_trait]
impl StoreHarness for Harness {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.fence.lock().expect("lock").clone())
    }

    fn holder(&self) -> Arc<dyn FencedStore> {
        Arc::new((self.holder)())
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        let Some(restart) = &self.restart else {
            return Ok(false);
        };
        let fresh = restart().await;
        *self.fence.lock().expect("lock") = fresh;
        Ok(true)
    }

    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let fence = self.fence.lock().expect("lock").clone();
        let key = fence.object_key(domain)?;
        corrupt(fence.store().as_ref(), &key, part).await
    }

    fn not_applicable(&self) -> NotApplicable {
        self.not_applicable
    }

    fn race_writers(&self) -> usize {
        self.race_writers
    }

    fn race_rounds(&self) -> usize {
        self.race_rounds
    }
}

/// The commit-pointer story on `fence`: two writers each create their data object, the newer
/// commits a manifest naming its own; the stale writer's late commit is refused; the pointer
/// resolves to the newer manifest; the data objects read back as written, with object_store
/// alone (no envelope); a create-only object is never overwritten; then the domain retires with
/// its immutable objects, and nothing else; and fence-conformance's retirement contract holds.
pub(crate) async fn commit_pointer_and_retirement(fence: &Observed<ObjectStoreFence>, table: &str) {
    use fence_conformance::services::token;
    use fence_core::{FenceError, WriteRequest};
    use fence_object_store::{Immutable, Manifest};

    let domain = Domain::new(format!("{table}/_commit")).expect("a domain");
    let (old, new) = (token(4), token(5));
    let stale_file = format!("tables/{table}/part-0004.csv");
    let fresh_file = format!("tables/{table}/part-0005.csv");
    let created = fence
        .put_plain(&domain, &stale_file, "a,b\n4,4\n".into())
        .await
        .expect("a plain object");
    assert_eq!(created, Immutable::Created(stale_file.clone()));
    fence
        .put_plain(&domain, &fresh_file, "a,b\n5,5\n".into())
        .await
        .expect("a plain object");
    let again = fence
        .put_plain(&domain, &fresh_file, "overwritten".into())
        .await
        .expect("a create-only write");
    assert_eq!(again, Immutable::AlreadyExists(fresh_file.clone()));
    let commit = |t, file: &str| {
        let manifest = Manifest::new([file]).expect("a manifest");
        WriteRequest::put(domain.clone(), t, manifest.encode())
    };
    fence
        .write(&commit(new, &fresh_file))
        .await
        .expect("the commit");
    match fence.write(&commit(old, &stale_file)).await {
        Err(FenceError::Fenced { .. }) => {}
        other => panic!("a stale writer's late commit must be fenced, got {other:?}"),
    }
    let resolved = fence
        .resolve(&domain)
        .await
        .expect("resolve")
        .expect("a commit");
    assert_eq!(resolved.manifest.keys(), std::slice::from_ref(&fresh_file));
    assert_eq!(resolved.token, new);
    let plain = fence
        .store()
        .get(&Path::parse(&fresh_file).expect("a path"))
        .await
        .expect("a plain read")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(
        &plain[..],
        b"a,b\n5,5\n",
        "written as is, read by object_store alone"
    );

    let immutable = fence
        .put_immutable(&domain, "stats", "rows=1".into())
        .await
        .expect("an immutable object");
    assert!(matches!(immutable, Immutable::Created(_)), "{immutable:?}");
    let neighbour = Domain::new(format!("{table}/_other")).expect("a domain");
    fence
        .write(&WriteRequest::put(neighbour.clone(), token(1), "kept"))
        .await
        .expect("a neighbour");
    let retired = fence_core::Retirer::retire(&**fence, &domain)
        .await
        .expect("retire");
    assert_eq!(retired.removed, 2, "the pointer and its immutable object");
    assert_eq!(fence.resolve(&domain).await.expect("resolve"), None);
    assert_eq!(
        fence.get_immutable(&domain, "stats").await.expect("a read"),
        None
    );
    let kept = fence.read(&neighbour).await.expect("a read");
    assert_eq!(kept.value().map(|v| v.to_vec()), Some(b"kept".to_vec()));
    let retired = Domain::new(format!("{table}/retired")).expect("a domain");
    fence_conformance::retirement::retirement_removes_the_domain_and_nothing_else(
        &**fence, &**fence, None, &retired,
    )
    .await;
}
