//! A write of a domain's object through core's compare-and-set loop ([`fence_core::raw::cas`]): the
//! state is the object's ETag and envelope header, a commit is a PUT conditioned on that ETag
//! (or on the key's absence).

use bytes::{Bytes, BytesMut};
use fence_core::raw::cas::{self, CasPolicy, CasResource, Committed, Step};
use fence_core::raw::EntryHead;
use fence_core::{Domain, FenceError, Operation};

use crate::error::{backend_error, Failure, S3FenceError, BACKEND};
use crate::fence::BACKOFF;
use crate::options::ObjectOptions;
use crate::requests::Expect;
use crate::S3Fence;
use fence_objects::Known;
use fence_objects::{decode, Header};

/// An object's version, as a decision sees it: its ETag and header (`None`: no object).
type Version = Option<(String, Header)>;

/// Why a conditional PUT was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// The object moved on (412, 404, or a new version under a claim's read).
    Raced,
    /// 409: a concurrent conditional write.
    Conflict,
    /// 503 SlowDown: refused for load, nothing done.
    Throttled,
}

/// One domain's object, for one operation.
struct ObjectCas<'a> {
    fence: &'a S3Fence,
    key: String,
    domain: &'a Domain,
    operation: Operation,
    /// The payload and its options, or `None` to keep the object's (a claim).
    payload: Option<(Bytes, &'a ObjectOptions)>,
}

impl CasResource for ObjectCas<'_> {
    type State = Version;
    type Change = Header;
    type Loss = Loss;

    fn remembered(&self) -> Option<Version> {
        let known = self.fence.inner.cache.get(&self.key)?;
        Some(Some((known.version, known.header)))
    }

    async fn load(&self) -> Result<Version, FenceError> {
        self.fence
            .load_header(&self.key, self.domain, self.operation)
            .await
    }

    async fn commit(
        &self,
        current: &Version,
        header: Header,
    ) -> Result<Committed<Version, Loss>, FenceError> {
        let fence = self.fence;
        // A claim on a live value rewrites the value: fetch it at exactly this version.
        let kept;
        let (payload, options) = match (current, &self.payload) {
            (_, Some((payload, options))) => (payload.clone(), *options),
            (Some((etag, header)), None) => match fence
                .payload_at(&self.key, self.domain, self.operation, etag, header)
                .await?
            {
                Some((payload, options)) => {
                    kept = options;
                    (payload, &kept)
                }
                // Another writer moved the object on.
                None => return Ok(lost(Loss::Raced)),
            },
            (None, None) => (Bytes::new(), &fence.inner.object_options),
        };
        // One allocation of the final size: the header, then the payload copied once.
        let encoded = header.encode();
        let mut body = BytesMut::with_capacity(encoded.len() + payload.len());
        body.extend_from_slice(&encoded);
        body.extend_from_slice(&payload);
        let expect = match current {
            Some((etag, _)) => Expect::Etag(etag.clone()),
            None => Expect::Absent,
        };
        let put = fence
            .put_conditional(&self.key, body.freeze(), &expect, options)
            .await;
        if put.is_err() {
            fence.inner.cache.remove(&self.key);
        }
        match put {
            Ok(etag) => {
                fence.inner.cache.insert(
                    self.key.clone(),
                    Known {
                        version: etag,
                        header,
                    },
                );
                Ok(Committed::Applied)
            }
            Err(Failure::Precondition | Failure::NotFound) => Ok(lost(Loss::Raced)),
            Err(Failure::Conflict) => Ok(lost(Loss::Conflict)),
            Err(Failure::Throttled) => Ok(lost(Loss::Throttled)),
            Err(failure) => Err(failure.into_fence_error(self.domain, self.operation, true)),
        }
    }

    fn pauses_after(&self, loss: &Loss) -> bool {
        matches!(loss, Loss::Conflict | Loss::Throttled)
    }

    fn exhausted(&self, attempts: u32, last: Option<Loss>) -> FenceError {
        if last == Some(Loss::Throttled) {
            // Still refused for load: the server is overloaded, not the object contended.
            return Failure::Throttled.into_fence_error(self.domain, self.operation, true);
        }
        backend_error(
            Some(self.domain),
            S3FenceError::TooManyConflicts {
                attempts: usize::try_from(attempts).unwrap_or(usize::MAX),
            },
        )
    }
}

/// A lost attempt whose object is read again.
fn lost(loss: Loss) -> Committed<Version, Loss> {
    Committed::Lost { loss, now: None }
}

impl S3Fence {
    /// A write of a domain's object: `payload` is the payload and the options to write it
    /// with, or `None` to keep the object's payload and options (a claim). `decide` gets the
    /// object's header (`None`: no object) and whether it came from the cache.
    pub(crate) async fn conditional_update<T: Send>(
        &self,
        domain: &Domain,
        operation: Operation,
        mut decide: impl FnMut(Option<&Header>, bool) -> Result<Step<T, Header>, FenceError> + Send,
        payload: Option<(Bytes, &ObjectOptions)>,
    ) -> Result<T, FenceError> {
        let key = self.object_key(domain)?;
        self.probe().await?;
        let object = ObjectCas {
            fence: self,
            key,
            domain,
            operation,
            payload,
        };
        let policy = CasPolicy {
            max_attempts: u32::try_from(self.inner.max_attempts).unwrap_or(u32::MAX),
            backoff: BACKOFF,
            free_losses: 0,
        };
        cas::drive(&object, policy, |version: &Version, remembered| {
            decide(version.as_ref().map(|(_, header)| header), remembered)
        })
        .await
    }

    /// The payload and options of the version `etag`, or `None` if the object moved on. An
    /// object without a value is rewritten with the builder's options.
    async fn payload_at(
        &self,
        key: &str,
        domain: &Domain,
        operation: Operation,
        etag: &str,
        header: &Header,
    ) -> Result<Option<(Bytes, ObjectOptions)>, FenceError> {
        if !header.head.is_some_and(EntryHead::is_live) {
            return Ok(Some((Bytes::new(), self.inner.object_options.clone())));
        }
        let Some(fetched) = self.fetch(key, domain, operation, None).await? else {
            return Ok(None);
        };
        if fetched.etag != etag {
            return Ok(None);
        }
        let (_, offset) = decode(BACKEND, domain, key, &fetched.bytes)?;
        let options = self.options_of(key, domain, operation, &fetched).await?;
        Ok(Some((fetched.bytes.slice(offset..), options)))
    }
}
