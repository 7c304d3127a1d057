//! What the tests share: object_store clients of the test servers, a conformance harness over
//! any of them, and state damage going around Fence.
#![allow(dead_code, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{NotApplicable, StatePart, StoreHarness};
use fence_core::{BoxError, Domain, FencedStore, Observed};
use fence_object_store::object_store::aws::AmazonS3Builder;
use fence_object_store::object_store::azure::MicrosoftAzureBuilder;
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
    use fence_testkit::azurite;
    Arc::new(
        MicrosoftAzureBuilder::new()
            .with_account(azurite::ACCOUNT)
            .with_access_key(azurite::ACCOUNT_KEY)
            .with_container_name(azurite::CONTAINER)
            .with_endpoint(endpoint.to_owned())
            .with_allow_http(true)
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
    let Some(damaged) = s3_support::damage_envelope(&object, part)? else {
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
