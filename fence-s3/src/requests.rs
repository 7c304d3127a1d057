//! The S3 requests Fence makes: read a header, read an object, write one conditionally.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use fence_core::{Domain, FenceError, Operation};

use crate::error::{backend_error, classify, Failure, S3FenceError, BACKEND};
use crate::options::ObjectOptions;
use crate::S3Fence;
use fence_objects::{decode, Header, MAX_HEADER_BYTES};

/// The write condition that makes a PUT a compare-and-set.
#[derive(Clone, Debug)]
pub(crate) enum Expect {
    /// `If-None-Match: *`: the key must not exist.
    Absent,
    /// `If-Match: <etag>`: the object must still be this version.
    Etag(String),
}

/// An object's bytes, version and options (tags not included: see [`S3Fence::options_of`]).
pub(crate) struct Fetched {
    pub(crate) etag: String,
    pub(crate) bytes: Bytes,
    pub(crate) options: ObjectOptions,
    pub(crate) tag_count: usize,
}

impl S3Fence {
    /// GETs `key` (only its first `range` bytes when given); `None` when it does not exist.
    pub(crate) async fn fetch(
        &self,
        key: &str,
        domain: &Domain,
        operation: Operation,
        range: Option<usize>,
    ) -> Result<Option<Fetched>, FenceError> {
        let mut attempt = 0;
        loop {
            let mut get = self
                .inner
                .client
                .get_object()
                .bucket(&self.inner.bucket)
                .key(key);
            if let Some(bytes) = range {
                get = get.range(format!("bytes=0-{}", bytes.saturating_sub(1)));
            }
            let output = match get.send().await {
                Ok(output) => output,
                Err(error) => match classify(error, &self.inner.bucket) {
                    Failure::NotFound => return Ok(None),
                    // `bytes=0-N` is unsatisfiable only for an empty object: no envelope, so
                    // it is foreign state like any other, never a retryable error.
                    Failure::Refused(S3FenceError::Service { status: 416, .. })
                        if range.is_some() =>
                    {
                        return Err(FenceError::corrupt(
                            BACKEND,
                            domain,
                            format!("object `{key}` is empty: it has no fence envelope (written by another tool?); adopt it explicitly to fence it"),
                        ));
                    }
                    Failure::Throttled | Failure::Conflict if attempt < self.inner.max_attempts => {
                        attempt += 1;
                        self.backoff(attempt).await;
                        continue;
                    }
                    failure => return Err(failure.into_fence_error(domain, operation, false)),
                },
            };
            let etag = output.e_tag().map(str::to_owned).ok_or_else(|| {
                FenceError::corrupt(BACKEND, domain, "S3 returned the object without an ETag")
            })?;
            let options = ObjectOptions::of_object(&output);
            let tag_count = usize::try_from(output.tag_count().unwrap_or(0)).unwrap_or(0);
            let bytes = output
                .body
                .collect()
                .await
                .map_err(|e| backend_error(Some(domain), S3FenceError::Transport(Box::new(e))))?
                .into_bytes();
            return Ok(Some(Fetched {
                etag,
                bytes,
                options,
                tag_count,
            }));
        }
    }

    /// The whole options of a fetched object: its tags need a request of their own, made only
    /// when the object has some.
    pub(crate) async fn options_of(
        &self,
        key: &str,
        domain: &Domain,
        operation: Operation,
        fetched: &Fetched,
    ) -> Result<ObjectOptions, FenceError> {
        if fetched.tag_count == 0 {
            return Ok(fetched.options.clone());
        }
        let tags = self
            .inner
            .client
            .get_object_tagging()
            .bucket(&self.inner.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| {
                classify(e, &self.inner.bucket).into_fence_error(domain, operation, false)
            })?;
        Ok(fetched.options.clone().with_tags(
            tags.tag_set()
                .iter()
                .map(|tag| (tag.key().to_owned(), tag.value().to_owned())),
        ))
    }

    /// Reads and validates the envelope header of `key` with one ranged GET.
    pub(crate) async fn load_header(
        &self,
        key: &str,
        domain: &Domain,
        operation: Operation,
    ) -> Result<Option<(String, Header)>, FenceError> {
        let Some(fetched) = self
            .fetch(key, domain, operation, Some(MAX_HEADER_BYTES))
            .await?
        else {
            return Ok(None);
        };
        let (header, _) = decode(BACKEND, domain, key, &fetched.bytes)?;
        Ok(Some((fetched.etag, header)))
    }

    /// PUTs `body` at `key` under `expect`; multipart above the threshold, completed with the
    /// same condition. Returns the new ETag.
    pub(crate) async fn put_conditional(
        &self,
        key: &str,
        body: Bytes,
        expect: &Expect,
        options: &ObjectOptions,
    ) -> Result<String, Failure> {
        if body.len() > self.inner.multipart_threshold {
            return self.put_multipart(key, body, expect, options).await;
        }
        let put = self
            .inner
            .client
            .put_object()
            .bucket(&self.inner.bucket)
            .key(key)
            .body(ByteStream::from(body));
        let mut put = options.apply_to_put(put);
        put = match expect {
            Expect::Absent => put.if_none_match("*"),
            Expect::Etag(etag) => put.if_match(etag),
        };
        let output = put
            .send()
            .await
            .map_err(|e| classify(e, &self.inner.bucket))?;
        output.e_tag().map(str::to_owned).ok_or_else(|| {
            Failure::MaybeApplied(S3FenceError::Service {
                status: 200,
                code: "NoETag".into(),
                message: "PutObject returned no ETag".into(),
            })
        })
    }

    async fn put_multipart(
        &self,
        key: &str,
        body: Bytes,
        expect: &Expect,
        options: &ObjectOptions,
    ) -> Result<String, Failure> {
        let bucket = &self.inner.bucket;
        let client = &self.inner.client;
        let create = client.create_multipart_upload().bucket(bucket).key(key);
        let created = options
            .apply_to_multipart(create)
            .send()
            .await
            .map_err(|e| classify(e, bucket))?;
        let Some(upload_id) = created.upload_id().map(str::to_owned) else {
            return Err(Failure::Refused(S3FenceError::Service {
                status: 200,
                code: "NoUploadId".into(),
                message: "CreateMultipartUpload returned no upload id".into(),
            }));
        };
        let result = async {
            let mut parts = Vec::new();
            for (index, chunk) in body.chunks(self.inner.part_size).enumerate() {
                let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
                let part = client
                    .upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .part_number(number)
                    .body(ByteStream::from(body.slice_ref(chunk)))
                    .send()
                    .await
                    .map_err(|e| classify(e, bucket))?;
                parts.push(
                    CompletedPart::builder()
                        .part_number(number)
                        .set_e_tag(part.e_tag().map(str::to_owned))
                        .build(),
                );
            }
            let mut complete = client
                .complete_multipart_upload()
                .bucket(bucket)
                .key(key)
                .upload_id(&upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                );
            complete = match expect {
                Expect::Absent => complete.if_none_match("*"),
                Expect::Etag(etag) => complete.if_match(etag),
            };
            let done = complete.send().await.map_err(|e| classify(e, bucket))?;
            done.e_tag().map(str::to_owned).ok_or_else(|| {
                Failure::MaybeApplied(S3FenceError::Service {
                    status: 200,
                    code: "NoETag".into(),
                    message: "CompleteMultipartUpload returned no ETag".into(),
                })
            })
        }
        .await;
        if result.is_err() {
            // Best effort: an upload that never completes holds storage until aborted.
            let _ = client
                .abort_multipart_upload()
                .bucket(bucket)
                .key(key)
                .upload_id(&upload_id)
                .send()
                .await;
        }
        result
    }
}
