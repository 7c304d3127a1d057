//! Foreign objects brought under fencing, and the commit-pointer pattern for multi-object state.
//!
//! S3 cannot update two objects atomically, so Fence fences per object. State spread over many
//! objects is written as immutable data objects (create-only, `If-None-Match: *`, never
//! overwritten) plus ONE fenced manifest, the domain's object, that points at them. A stale
//! writer can still create data objects, but no manifest will ever point at them: only the
//! manifest write is fenced, and readers follow the manifest. Data objects carry no envelope,
//! so plain readers (Athena, Spark, a CDN) read them as they are.

use bytes::{Bytes, BytesMut};
use fence_core::raw::{observe, EntryHead};
use fence_core::{Accepted, Domain, FenceError, FencingToken, Operation, Revision};

use crate::error::{backend_error, Failure, S3FenceError, BACKEND};
use crate::options::ObjectOptions;
use crate::requests::Expect;
use crate::S3Fence;
use fence_objects::{fresh_nonce, EnvelopeError, Header, Immutable, Known, Resolved};

impl S3Fence {
    /// The key of an immutable data object `name` of `domain` (`name` follows the rules of a
    /// domain name); an invalid or overlong name is [`FenceError::InvalidInput`].
    pub fn immutable_key(&self, domain: &Domain, name: &str) -> Result<String, FenceError> {
        self.inner.keys.data(domain, name)
    }

    /// Creates an immutable data object (create-only: an existing one is never overwritten).
    /// Point at it from the domain's fenced manifest: the commit-pointer pattern, in which a
    /// stale holder's data objects may exist but nothing a reader follows points at them.
    ///
    /// ```no_run
    /// use fence_core::{Domain, FencedStore, FencingToken, WriteRequest};
    /// # async fn run(fence: fence_core::Observed<fence_s3::S3Fence>) -> Result<(), fence_core::FenceError> {
    /// let report = Domain::new("reports/2026-q3")?;
    /// let token = FencingToken::new(42)?;
    /// // Name the data objects after the token: two holders never write the same name.
    /// let section = format!("summary-{token}");
    /// fence.put_immutable(&report, &section, "the summary".into()).await?;
    /// // The fenced manifest is the commit: a stale token is refused here, and its sections
    /// // stay unreferenced.
    /// fence.write(&WriteRequest::put(report.clone(), token, section)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn put_immutable(
        &self,
        domain: &Domain,
        name: &str,
        bytes: Bytes,
    ) -> Result<Immutable, FenceError> {
        observe(BACKEND, Operation::Write, domain, None, async {
            let key = self.immutable_key(domain, name)?;
            fence_core::raw::pipeline::check_size(
                domain,
                bytes.len(),
                Some(self.inner.max_value_bytes),
            )?;
            self.create_only(key, bytes, &self.inner.object_options, domain)
                .await
        })
        .await
    }

    /// Creates a plain object at exactly `key` (create-only: an existing object is never
    /// overwritten), with no envelope, so that any reader sees its bytes as written. `key` must
    /// lie outside what this fence owns (its prefix's domain objects); list it in a
    /// [`Manifest`](crate::Manifest) that a fenced write commits, and readers resolve it with
    /// [`S3Fence::resolve`]. `domain` names the owner in errors and telemetry.
    pub async fn put_plain(
        &self,
        domain: &Domain,
        key: &str,
        bytes: Bytes,
        options: &ObjectOptions,
    ) -> Result<Immutable, FenceError> {
        observe(BACKEND, Operation::Write, domain, None, async {
            self.inner.keys.plain(key)?;
            if let Some(why) = options.problem() {
                return Err(fence_core::InvalidInput::Configuration(format!(
                    "plain object `{key}` of domain `{domain}`: {why}"
                ))
                .into());
            }
            fence_core::raw::pipeline::check_size(
                domain,
                bytes.len(),
                Some(self.inner.max_value_bytes),
            )?;
            self.create_only(key.to_owned(), bytes, options, domain)
                .await
        })
        .await
    }

    async fn create_only(
        &self,
        key: String,
        bytes: Bytes,
        options: &ObjectOptions,
        domain: &Domain,
    ) -> Result<Immutable, FenceError> {
        self.probe().await?;
        match self
            .put_conditional(&key, bytes, &Expect::Absent, options)
            .await
        {
            Ok(_) => Ok(Immutable::Created(key)),
            Err(Failure::Precondition | Failure::Conflict) => Ok(Immutable::AlreadyExists(key)),
            Err(failure) => Err(failure.into_fence_error(domain, Operation::Write, true)),
        }
    }

    /// Reads the domain's fenced [`Manifest`](crate::Manifest): the keys of the plain objects that the last
    /// accepted write committed, with that write's token and revision. `None` when the domain
    /// holds no value; a value that is not a manifest is [`FenceError::CorruptState`].
    pub async fn resolve(&self, domain: &Domain) -> Result<Option<Resolved>, FenceError> {
        // Traced and counted as a read, as the other extensions here are as writes.
        let snapshot = observe(
            BACKEND,
            Operation::Read,
            domain,
            None,
            self.read_now(domain),
        )
        .await?;
        fence_objects::resolved(BACKEND, domain, &snapshot)
    }

    /// Reads an immutable data object.
    pub async fn get_immutable(
        &self,
        domain: &Domain,
        name: &str,
    ) -> Result<Option<Bytes>, FenceError> {
        let key = self.immutable_key(domain, name)?;
        Ok(self
            .fetch(&key, domain, Operation::Read, None)
            .await?
            .map(|f| f.bytes))
    }

    /// Brings an object written by another tool (no fence envelope) under fencing with `token`:
    /// its bytes become the value at revision 1, and the domain's mark becomes `token`; its
    /// content type, cache control, metadata, tags and encryption are kept. The rewrite is
    /// conditional on the object not changing meanwhile. A configured step bound
    /// applies from zero ([`crate::S3FenceBuilder::max_token_step`]).
    pub async fn adopt(
        &self,
        domain: &Domain,
        token: FencingToken,
    ) -> Result<Accepted, FenceError> {
        observe(BACKEND, Operation::Write, domain, Some(token), async {
            let key = self.object_key(domain)?;
            self.inner.bounds.check(domain, None, token)?;
            self.probe().await?;
            let Some(fetched) = self.fetch(&key, domain, Operation::Write, None).await? else {
                return Err(backend_error(Some(domain), S3FenceError::NoObject { key }));
            };
            match Header::decode(&fetched.bytes) {
                Err(EnvelopeError::Foreign) => {}
                Ok((header, _)) => {
                    // The token is decided first, as on every backend (Redis's adopt too): a
                    // stale token is refused as stale; a current one meets data that is
                    // already under fencing.
                    let _ = fence_core::raw::pipeline::decide_claim(
                        domain,
                        Some(header.hwm),
                        token,
                        fence_core::raw::TokenBounds::OPEN,
                    )?;
                    return Err(backend_error(Some(domain), S3FenceError::AlreadyFenced));
                }
                Err(damaged) => {
                    return Err(FenceError::corrupt(
                        BACKEND,
                        domain,
                        format!("object `{key}`: {damaged}; it is not adopted"),
                    ))
                }
            }
            let header = Header {
                hwm: token,
                head: Some(EntryHead::Value {
                    token,
                    revision: Revision::new(1),
                }),
                nonce: fresh_nonce(),
                ops: Default::default(),
            };
            // The object keeps its content type, metadata, tags and encryption.
            let options = self
                .options_of(&key, domain, Operation::Write, &fetched)
                .await?;
            if let Some(why) = options.fenced_problem() {
                // A compressed object, say: the envelope in front would break its readers.
                return Err(backend_error(
                    Some(domain),
                    S3FenceError::NotAdoptable { key, reason: why },
                ));
            }
            let mut body = BytesMut::from(&header.encode()[..]);
            body.extend_from_slice(&fetched.bytes);
            match self
                .put_conditional(&key, body.freeze(), &Expect::Etag(fetched.etag), &options)
                .await
            {
                Ok(etag) => {
                    self.inner.cache.insert(
                        key.clone(),
                        Known {
                            version: etag,
                            header,
                        },
                    );
                    Ok(Accepted::new(token, Revision::new(1), None))
                }
                Err(failure) => Err(failure.into_fence_error(domain, Operation::Write, true)),
            }
        })
        .await
    }
}
