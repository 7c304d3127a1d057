//! The traits adapters implement, and the conveniences users call.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::{
    AppendOutcome, AppendRequest, Capabilities, Claimed, Domain, FenceError, FencingToken,
    LogEntry, Snapshot, WriteOutcome, WriteRequest,
};

/// What every fenced resource offers: claims and the high-water mark.
///
/// Implementations hold the high-water mark (HWM) of each domain at the resource, persisted
/// with the protected data in the same atomic step, and never delete it.
///
/// Adapters implement these traits plainly; telemetry is a layer over them
/// ([`crate::Observed`], which the adapters' builders apply), so every backend reports alike
/// without writing any of it.
#[async_trait]
pub trait Fence: Send + Sync + fmt::Debug {
    /// The backend's short name (`memory`, `redis`, `s3`, `kafka`), used in errors and metrics.
    fn backend(&self) -> &'static str;

    /// What this resource supports.
    fn capabilities(&self) -> Capabilities;

    /// Raises the domain's HWM to `token` without writing data.
    ///
    /// A new owner claims right after acquiring its lease so that stale holders are fenced
    /// before its first write. Without a claim, a fresh resource accepts an old token until a
    /// newer one arrives.
    ///
    /// # Behavior
    /// - `token` older than the HWM → [`FenceError::Fenced`]; nothing changes.
    /// - `token` equal to the HWM → accepted (claims are idempotent); nothing changes.
    /// - `token` newer, or no HWM yet → the HWM becomes `token`; stored data and its revision
    ///   are left alone.
    ///
    /// ```
    /// use fence_core::{Domain, Fence, FencingToken, MemoryFence};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fence_core::FenceError> {
    /// let resource = MemoryFence::new();
    /// let shard = Domain::new("shard-7")?;
    /// // The new owner claims with its lease's token before its first write...
    /// let claimed = resource.claim(&shard, FencingToken::new(8)?).await?;
    /// assert_eq!(claimed.previous_high_water_mark, None);
    /// // ...and the previous owner's token is refused from then on, before it writes anything.
    /// let stale = resource.claim(&shard, FencingToken::new(7)?).await;
    /// assert!(stale.is_err_and(|e| e.is_fenced()));
    /// # Ok(()) }
    /// ```
    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError>;

    /// The domain's HWM: the greatest token accepted by a write, delete, append or claim.
    ///
    /// # Behavior
    /// - `None` for a domain that never accepted anything.
    /// - Never decreases, also across deletes (tombstones keep it) and, where
    ///   [`Capabilities::survives_restart`] holds, across backend restarts.
    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError>;
}

/// A key-value or object resource: one value per domain, written and deleted under a token.
#[async_trait]
pub trait FencedStore: Fence {
    /// Applies a fenced put or delete in one atomic step at the resource.
    ///
    /// # Behavior
    /// Checks run in this order, and the mutation happens only if all pass:
    /// 1. Input limits (e.g. [`Capabilities::max_value_bytes`]) → [`FenceError::InvalidInput`]
    ///    before any I/O.
    /// 2. Operation id: if `(domain, token, op_id)` was already applied and is still retained,
    ///    returns [`WriteOutcome::Duplicate`] with the first outcome and applies nothing.
    /// 3. Token: older than the HWM → [`FenceError::Fenced`]; equal → accepted under
    ///    [`crate::EqualTokenPolicy::SameOwner`], fenced under `Strict`; newer or no HWM →
    ///    accepted.
    /// 4. Revision condition → [`FenceError::RevisionMismatch`] when it does not hold.
    /// 5. The value is stored (or replaced by a tombstone for a delete), the revision grows by
    ///    one, and the HWM becomes the token: [`WriteOutcome::Accepted`].
    ///
    /// A delete of an absent value is accepted and leaves a tombstone. A failure after the
    /// request was sent whose outcome is unknown is [`FenceError::Ambiguous`], never a guess.
    ///
    /// ```
    /// use fence_core::{Domain, FencedStore, FencingToken, MemoryFence, OperationId, WriteOutcome, WriteRequest};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fence_core::FenceError> {
    /// let store = MemoryFence::new();
    /// let invoice = Domain::new("invoice-42")?;
    /// let token = FencingToken::new(3)?; // from the lease
    /// let request = WriteRequest::put(invoice.clone(), token, "total=120")
    ///     .with_op_id(OperationId::new("invoice-42/total")?);
    /// let first = store.write(&request).await?;
    /// assert!(matches!(first, WriteOutcome::Accepted(_)));
    /// // A retry after a lost answer replays the first outcome instead of writing twice.
    /// let retry = store.write(&request).await?;
    /// assert!(matches!(retry, WriteOutcome::Duplicate(_)));
    /// assert_eq!(retry.accepted().revision, first.accepted().revision);
    /// # Ok(()) }
    /// ```
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError>;

    /// Reads the domain's entry (value or tombstone, with the token that wrote it and its
    /// revision) and its HWM.
    ///
    /// # Behavior
    /// - A domain never written reads as [`crate::Entry::Absent`] (its HWM may be set by a claim).
    /// - Foreign or corrupt state at the resource is [`FenceError::CorruptState`], never a value.
    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError>;
}

/// A log resource: batches of records appended under a token, committed all-or-nothing.
/// No read-by-key and no delete.
#[async_trait]
pub trait FencedLog: Fence {
    /// Appends a batch of records in one atomic step (a transaction).
    ///
    /// # Behavior
    /// - An empty batch or one above the size limit → [`FenceError::InvalidInput`], no I/O.
    /// - A retained `(domain, token, op_id)` already committed → [`AppendOutcome::Duplicate`].
    /// - The token rule as for [`FencedStore::write`]; a fenced batch leaves no record visible
    ///   to read_committed consumers.
    /// - Otherwise every record is committed, in order, and the HWM becomes the token.
    ///
    /// ```
    /// use fence_core::{AppendRequest, Domain, Fence, FencedLog, FencingToken, MemoryFence, Record};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), fence_core::FenceError> {
    /// let log = MemoryFence::new();
    /// let partition = Domain::new("orders/partition-7")?;
    /// let (old, new) = (FencingToken::new(1)?, FencingToken::new(2)?);
    /// let batch = |token, text: &str| {
    ///     AppendRequest::new(partition.clone(), token, vec![Record::new(text.to_owned())])
    /// };
    /// log.append(&batch(old, "order-1 shipped")).await?;
    /// log.claim(&partition, new).await?; // a new owner takes the partition over
    /// // The old owner's next batch is refused as a whole, and never read.
    /// let stale = log.append(&batch(old, "order-2 shipped")).await;
    /// assert!(stale.is_err_and(|e| e.is_fenced()));
    /// assert_eq!(log.read_log(&partition).await?.len(), 1);
    /// # Ok(()) }
    /// ```
    async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError>;

    /// Reads the domain's committed records in log order, as a read_committed consumer sees
    /// them.
    ///
    /// # Behavior
    /// - Records of fenced or aborted batches never appear.
    /// - Tokens never decrease along the returned sequence.
    async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError>;
}

/// Conveniences over [`FencedStore`], implemented for every store. Do not implement it yourself.
///
/// ```
/// use fence_core::{Domain, FencedStore, FencedStoreExt, FencingToken, MemoryFence};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), fence_core::FenceError> {
/// let store = MemoryFence::new();
/// let orders = Domain::new("orders")?;
/// store.put(&orders, FencingToken::new(2)?, "v2").await?;
/// let stale = store.put(&orders, FencingToken::new(1)?, "v1").await;
/// assert!(stale.is_err_and(|e| e.is_fenced()));
/// assert_eq!(store.read(&orders).await?.value().map(|v| &v[..]), Some(&b"v2"[..]));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait FencedStoreExt: FencedStore {
    /// A fenced put with the default options.
    async fn put(
        &self,
        domain: &Domain,
        token: FencingToken,
        value: impl Into<Bytes> + Send + 'async_trait,
    ) -> Result<WriteOutcome, FenceError> {
        self.write(&WriteRequest::put(domain.clone(), token, value))
            .await
    }

    /// A fenced delete with the default options.
    async fn delete(
        &self,
        domain: &Domain,
        token: FencingToken,
    ) -> Result<WriteOutcome, FenceError> {
        self.write(&WriteRequest::delete(domain.clone(), token))
            .await
    }
}

impl<T: FencedStore + ?Sized> FencedStoreExt for T {}

/// Forwards every method to the shared, boxed or borrowed adapter, so `Arc<MemoryFence>`,
/// `Arc<dyn FencedStore>`, `Box<dyn FencedLog>` and `&dyn FencedStore` can be passed wherever
/// an adapter is expected (and wrapped in a layer).
macro_rules! forward_through {
    ($($pointer:ty),*) => {$(
        #[async_trait]
        impl<T: Fence + ?Sized> Fence for $pointer {
            fn backend(&self) -> &'static str {
                (**self).backend()
            }

            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }

            async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
                (**self).claim(domain, token).await
            }

            async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
                (**self).high_water_mark(domain).await
            }
        }

        #[async_trait]
        impl<T: FencedStore + ?Sized> FencedStore for $pointer {
            async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
                (**self).write(request).await
            }

            async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
                (**self).read(domain).await
            }
        }

        #[async_trait]
        impl<T: FencedLog + ?Sized> FencedLog for $pointer {
            async fn append(&self, request: &AppendRequest) -> Result<AppendOutcome, FenceError> {
                (**self).append(request).await
            }

            async fn read_log(&self, domain: &Domain) -> Result<Vec<LogEntry>, FenceError> {
                (**self).read_log(domain).await
            }
        }
    )*};
}

forward_through!(Arc<T>, Box<T>, &T);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryFence;

    async fn fenced_put<S: FencedStore>(store: S, token: u64) -> Result<WriteOutcome, FenceError> {
        let domain = Domain::new("d")?;
        store.put(&domain, FencingToken::new(token)?, "v").await
    }

    async fn claimed_log<L: FencedLog>(log: L, token: u64) -> Result<Claimed, FenceError> {
        log.claim(&Domain::new("l")?, FencingToken::new(token)?)
            .await
    }

    #[tokio::test]
    async fn shared_and_boxed_adapters_are_adapters() -> Result<(), FenceError> {
        let memory = Arc::new(MemoryFence::new());
        fenced_put(memory.clone(), 2).await?;
        let shared: Arc<dyn FencedStore> = memory.clone();
        assert!(fenced_put(shared, 1).await.is_err_and(|e| e.is_fenced()));
        let boxed: Box<dyn FencedStore> = Box::new(memory.clone());
        assert_eq!(boxed.backend(), "memory");
        assert!(fenced_put(boxed, 3).await.is_ok());
        let log: Box<dyn FencedLog> = Box::new(memory.clone());
        claimed_log(log, 5).await?;
        assert!(claimed_log(Arc::clone(&memory), 4)
            .await
            .is_err_and(|e| e.is_fenced()));
        Ok(())
    }
}
