//! S3 errors, and the ONE function that classifies every status code and transport failure.

use std::error::Error as StdError;

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response;
use fence_core::{BackendErrorKind, BoxError, Domain, FenceError, Operation};

pub(crate) const BACKEND: &str = "s3";

/// What went wrong talking to S3: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum S3FenceError {
    /// Credentials were refused or lack permission.
    #[error("access denied by S3 ({code}): check credentials and the bucket policy")]
    AccessDenied {
        /// The S3 error code (`AccessDenied`, `InvalidAccessKeyId`, `SignatureDoesNotMatch`).
        code: String,
    },
    /// The bucket does not exist.
    #[error("bucket `{bucket}` does not exist")]
    NoSuchBucket {
        /// The bucket.
        bucket: String,
    },
    /// The endpoint accepted a write whose condition was false: it ignores conditional
    /// headers (a proxy, an emulator), so it cannot fence anything.
    #[error("the S3 endpoint ignores conditional writes ({detail}); refusing to fence through it")]
    ConditionsIgnored {
        /// Which probe step it accepted.
        detail: String,
    },
    /// Concurrent writers kept winning the compare-and-set.
    #[error("gave up after {attempts} conditional write attempts lost to concurrent writers")]
    TooManyConflicts {
        /// Attempts made.
        attempts: usize,
    },
    /// An object at a fenced key holds a valid envelope already (adopt is for foreign objects).
    #[error("the object is already under fencing")]
    AlreadyFenced,
    /// The object at the domain's key cannot be adopted as it is.
    #[error("object `{key}` cannot be adopted: {reason}")]
    NotAdoptable {
        /// The object key.
        key: String,
        /// Why, and what to do about it.
        reason: String,
    },
    /// There is no object to adopt at the domain's key.
    #[error("no object at `{key}` to adopt")]
    NoObject {
        /// The object key.
        key: String,
    },
    /// Any other answer from S3.
    #[error("S3 answered {status} {code}: {message}")]
    Service {
        /// HTTP status.
        status: u16,
        /// S3 error code.
        code: String,
        /// S3 error message.
        message: String,
    },
    /// The request could not be sent or its answer not read.
    #[error("S3 request failed: {0}")]
    Transport(#[source] BoxError),
}

impl S3FenceError {
    /// Whether a retry can help: the class this failure reports as.
    pub fn kind(&self) -> BackendErrorKind {
        match self {
            S3FenceError::AccessDenied { .. } => BackendErrorKind::PermissionDenied,
            S3FenceError::NoSuchBucket { .. } | S3FenceError::NoObject { .. } => {
                BackendErrorKind::NotFound
            }
            S3FenceError::ConditionsIgnored { .. }
            | S3FenceError::AlreadyFenced
            | S3FenceError::NotAdoptable { .. } => BackendErrorKind::Rejected,
            S3FenceError::TooManyConflicts { .. } => BackendErrorKind::Contention,
            S3FenceError::Service { status, .. } => match status {
                429 | 500..=599 => BackendErrorKind::Unavailable,
                409 | 412 => BackendErrorKind::Contention,
                404 => BackendErrorKind::NotFound,
                _ => BackendErrorKind::Rejected,
            },
            S3FenceError::Transport(_) => BackendErrorKind::Unavailable,
        }
    }
}

/// The [`FenceError::Backend`] for `source`, classified by [`S3FenceError::kind`].
pub(crate) fn backend_error(domain: Option<&Domain>, source: S3FenceError) -> FenceError {
    FenceError::backend(BACKEND, source.kind(), domain, source)
}

/// How a failed request ended, for the conditional-write loop and error reporting.
#[derive(Debug)]
pub(crate) enum Failure {
    /// 412: the condition did not hold (lost the race, or the object changed).
    Precondition,
    /// 409 ConditionalRequestConflict: a concurrent conditional write; retry.
    Conflict,
    /// 404 on the key (AWS answers If-Match on a missing key so; SeaweedFS answers 412).
    NotFound,
    /// 503 SlowDown: nothing was done; back off and retry.
    Throttled,
    /// The request certainly did not reach S3 (construction failed, connection refused).
    NotSent(S3FenceError),
    /// The request may have been applied: timeout, cut connection, 5xx after sending.
    MaybeApplied(S3FenceError),
    /// A definite answer that is not one of the above.
    Refused(S3FenceError),
}

/// Classifies any SDK error. Status codes differ across S3 implementations; all of them are
/// mapped here and nowhere else.
pub(crate) fn classify<E>(error: SdkError<E, Response>, bucket: &str) -> Failure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    match error {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let err = context.err();
            let code = err.code().unwrap_or_default().to_owned();
            let message = err.message().unwrap_or_default().to_owned();
            match (status, code.as_str()) {
                (412, _) | (_, "PreconditionFailed") => Failure::Precondition,
                (409, _) => Failure::Conflict,
                (404, "NoSuchBucket") => Failure::Refused(S3FenceError::NoSuchBucket {
                    bucket: bucket.to_owned(),
                }),
                (404, _) => Failure::NotFound,
                (403, _) | (_, "AccessDenied" | "InvalidAccessKeyId" | "SignatureDoesNotMatch") => {
                    Failure::Refused(S3FenceError::AccessDenied { code })
                }
                (503, _) | (_, "SlowDown") => Failure::Throttled,
                (500..=599, _) => Failure::MaybeApplied(S3FenceError::Service {
                    status,
                    code,
                    message,
                }),
                _ => Failure::Refused(S3FenceError::Service {
                    status,
                    code,
                    message,
                }),
            }
        }
        SdkError::ConstructionFailure(_) => {
            Failure::NotSent(S3FenceError::Transport(Box::new(error)))
        }
        SdkError::DispatchFailure(_) if fence_core::raw::refused_connection(&error) => {
            Failure::NotSent(S3FenceError::Transport(Box::new(error)))
        }
        other => Failure::MaybeApplied(S3FenceError::Transport(Box::new(other))),
    }
}

impl Failure {
    /// The fence error for a failure the operation does not handle itself.
    pub(crate) fn into_fence_error(
        self,
        domain: &Domain,
        operation: Operation,
        mutating: bool,
    ) -> FenceError {
        let source = match self {
            Failure::MaybeApplied(source) if mutating => {
                return FenceError::Ambiguous {
                    domain: domain.clone(),
                    operation,
                    source: Box::new(source),
                }
            }
            Failure::MaybeApplied(source) | Failure::NotSent(source) | Failure::Refused(source) => {
                source
            }
            Failure::Precondition => S3FenceError::Service {
                status: 412,
                code: "PreconditionFailed".into(),
                message: String::new(),
            },
            Failure::Conflict => S3FenceError::Service {
                status: 409,
                code: "ConditionalRequestConflict".into(),
                message: String::new(),
            },
            Failure::NotFound => S3FenceError::Service {
                status: 404,
                code: "NoSuchKey".into(),
                message: String::new(),
            },
            Failure::Throttled => S3FenceError::Service {
                status: 503,
                code: "SlowDown".into(),
                message: String::new(),
            },
        };
        backend_error(Some(domain), source)
    }
}
