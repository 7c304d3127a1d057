//! A write of a domain's object through core's compare-and-set loop ([`fence_core::raw::cas`]):
//! the state is the object's version and envelope header, a commit is a put conditioned on that
//! version (or on the object's absence).

use bytes::{Bytes, BytesMut};
use fence_core::raw::cas::{self, CasPolicy, CasResource, Committed, Step};
use fence_core::raw::EntryHead;
use fence_core::{Domain, FenceError, Operation};
use fence_objects::{decode, Header, Known};
use object_store::path::Path;
use object_store::Attributes;

use crate::error::{backend_error, store_error, ObjectStoreFenceError, BACKEND};
use crate::requests::{PutFailure, Version};
use crate::ObjectStoreFence;

/// An object's state, as a decision sees it (`None`: no object).
type State = Option<(Version, Header)>;

/// One domain's object, for one operation.
struct ObjectCas<'a> {
    fence: &'a ObjectStoreFence,
    path: Path,
    domain: &'a Domain,
    operation: Operation,
    /// The payload to write, or `None` to keep the object's (a claim).
    payload: Option<Bytes>,
}

impl CasResource for ObjectCas<'_> {
    type State = State;
    type Change = Header;
    type Loss = ();

    fn remembered(&self) -> Option<State> {
        let known = self.fence.inner.cache.get(self.path.as_ref())?;
        Some(Some((known.version, known.header)))
    }

    async fn load(&self) -> Result<State, FenceError> {
        self.fence
            .load_header(&self.path, self.domain, self.operation)
            .await
    }

    async fn commit(
        &self,
        current: &State,
        header: Header,
    ) -> Result<Committed<State, ()>, FenceError> {
        let fence = self.fence;
        let (payload, attributes) = match (current, &self.payload) {
            (_, Some(payload)) => (payload.clone(), Attributes::new()),
            // A claim on a live value rewrites the value and keeps its attributes (content
            // type, metadata): read it at exactly this version.
            (Some((version, header)), None) => match self.payload_at(version, header).await? {
                Some(kept) => kept,
                None => return Ok(lost(None)),
            },
            (None, None) => (Bytes::new(), Attributes::new()),
        };
        let encoded = header.encode();
        let mut body = BytesMut::with_capacity(encoded.len() + payload.len());
        body.extend_from_slice(&encoded);
        body.extend_from_slice(&payload);
        let key = self.path.to_string();
        let expected = current.as_ref().map(|(version, _)| version);
        match fence
            .put_conditional(&self.path, body.freeze(), attributes, expected)
            .await
        {
            Ok(Some(version)) => {
                fence.inner.cache.insert(key, Known { version, header });
                Ok(Committed::Applied)
            }
            Ok(None) => {
                fence.inner.cache.remove(&key);
                Ok(Committed::Applied)
            }
            Err(PutFailure::Lost) => {
                fence.inner.cache.remove(&key);
                // object_store resends a write after some failures (a 5xx, 429 or 408 answer;
                // a 409 on S3); if the first one applied, the resent one is refused by it. The
                // nonce tells this write from any other; a read that fails leaves it unknown.
                let now = self.load().await.map_err(|error| match error {
                    FenceError::Backend { source, .. } => FenceError::Ambiguous {
                        domain: self.domain.clone(),
                        operation: self.operation,
                        source,
                    },
                    other => other,
                })?;
                match now {
                    Some((version, ref stored)) if stored.nonce == header.nonce => {
                        fence.inner.cache.insert(key, Known { version, header });
                        Ok(Committed::Applied)
                    }
                    now => Ok(lost(Some(now))),
                }
            }
            Err(PutFailure::Failed(error)) => {
                fence.inner.cache.remove(&key);
                Err(store_error(error, self.domain, self.operation, true))
            }
        }
    }

    fn pauses_after(&self, _: &()) -> bool {
        true
    }

    fn exhausted(&self, attempts: u32, _: Option<()>) -> FenceError {
        backend_error(
            Some(self.domain),
            ObjectStoreFenceError::TooManyConflicts {
                attempts: usize::try_from(attempts).unwrap_or(usize::MAX),
            },
        )
    }
}

impl ObjectCas<'_> {
    /// The payload and attributes of `version`, or `None` if the object moved on. An object
    /// without a value is rewritten without attributes.
    async fn payload_at(
        &self,
        version: &Version,
        header: &Header,
    ) -> Result<Option<(Bytes, Attributes)>, FenceError> {
        if !header.head.is_some_and(EntryHead::is_live) {
            return Ok(Some((Bytes::new(), Attributes::new())));
        }
        let fetched = self
            .fence
            .fetch(&self.path, self.domain, self.operation, None)
            .await?;
        let Some(fetched) = fetched.filter(|f| f.version == *version) else {
            return Ok(None);
        };
        let (_, offset) = decode(BACKEND, self.domain, self.path.as_ref(), &fetched.bytes)?;
        Ok(Some((fetched.bytes.slice(offset..), fetched.attributes)))
    }
}

fn lost(now: Option<State>) -> Committed<State, ()> {
    Committed::Lost { loss: (), now }
}

impl ObjectStoreFence {
    /// A write of a domain's object: `payload` is the payload, or `None` to keep the object's
    /// (a claim). `decide` gets the object's header (`None`: no object) and whether it came from
    /// the cache.
    pub(crate) async fn conditional_update<T: Send>(
        &self,
        domain: &Domain,
        operation: Operation,
        mut decide: impl FnMut(Option<&Header>, bool) -> Result<Step<T, Header>, FenceError> + Send,
        payload: Option<Bytes>,
    ) -> Result<T, FenceError> {
        let path = self.object_path(domain)?;
        self.probe().await?;
        let object = ObjectCas {
            fence: self,
            path,
            domain,
            operation,
            payload,
        };
        let policy = CasPolicy {
            max_attempts: self.inner.max_attempts,
            backoff: crate::fence::BACKOFF,
            free_losses: 1,
        };
        cas::drive(&object, policy, |state: &State, remembered| {
            decide(state.as_ref().map(|(_, header)| header), remembered)
        })
        .await
    }
}
