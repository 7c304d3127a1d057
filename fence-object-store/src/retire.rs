//! Retiring a domain: its fenced object and its immutable objects
//! (`<prefix>!data!<escaped domain>!…`), deleted (object stores hold no leases to check).

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::error::store_error;
use crate::fence::path_of;
use crate::ObjectStoreFence;

#[async_trait]
impl Retirer for ObjectStoreFence {
    /// Lists the fence's prefix (object_store lists by folder, so the immutable objects are
    /// found among every object directly under the prefix), then deletes what is there. Needs
    /// list, read and delete on the prefix.
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        let store = &self.inner.store;
        let fail = |error| store_error(error, domain, Operation::Delete, false);
        let object = self.object_key(domain)?;
        let data_prefix = self.inner.keys.data_prefix(domain);
        let listed = store
            .list_with_delimiter(self.prefix_folder().as_ref())
            .await
            .map_err(fail)?;
        let mut doomed = vec![path_of(&object)?];
        doomed.extend(
            listed
                .objects
                .into_iter()
                .map(|meta| meta.location)
                .filter(|path| path.as_ref().starts_with(&data_prefix)),
        );
        let mut removed = 0;
        for path in &doomed {
            // HEAD first: stores answer a delete of a missing object with success, and the
            // count says what was there.
            let exists = match store.head(path).await {
                Ok(_) => true,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(error) => return Err(fail(error)),
            };
            match store.delete(path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(error) => return Err(fail(error)),
            }
            removed += usize::from(exists);
        }
        self.inner.cache.remove(&object);
        Ok(Retired::new(removed))
    }
}

/// The folder a key prefix names, as object_store lists it (`None`: the store's root).
pub(crate) fn folder_of(prefix: &str) -> Option<Path> {
    let folder = prefix.trim_end_matches('/');
    (!folder.is_empty()).then(|| Path::from_iter(folder.split('/')))
}

/// Deletes every object under the key prefix `prefix` (whole segments, as object_store lists)
/// and says how many there were: the objects of a `fence qualify` run or of a benchmark, under
/// a prefix no holder writes. Not fenced. An empty prefix (the whole store) is refused.
pub async fn delete_under(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<usize, object_store::Error> {
    use futures_util::TryStreamExt;
    let Some(folder) = folder_of(prefix) else {
        return Err(object_store::Error::Generic {
            store: "fence-object-store",
            source: "refusing to delete every object of the store (an empty prefix)".into(),
        });
    };
    let listed: Vec<_> = store.list(Some(&folder)).try_collect().await?;
    for object in &listed {
        store.delete(&object.location).await?;
    }
    Ok(listed.len())
}
