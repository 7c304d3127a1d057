//! Errors, and how an `object_store` failure is classified (retryable or not, ambiguous or not).

use fence_core::{BackendErrorKind, Domain, FenceError, Operation};

pub(crate) const BACKEND: &str = "object_store";

/// What went wrong through `object_store`: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectStoreFenceError {
    /// The backend cannot make a write conditional on the object's version (object_store's
    /// `LocalFileSystem` implements create-only writes but no compare-and-swap), so it cannot
    /// fence anything.
    #[error("{store} cannot compare-and-swap an object ({detail}); refusing to fence through it")]
    ConditionsUnsupported {
        /// The store, as object_store names it.
        store: String,
        /// What it refused.
        detail: String,
    },
    /// The backend accepted a write whose condition was false: it ignores conditions (a proxy,
    /// an emulator), so it cannot fence anything.
    #[error("{store} ignores conditional writes ({detail}); refusing to fence through it")]
    ConditionsIgnored {
        /// The store, as object_store names it.
        store: String,
        /// Which probe step it accepted.
        detail: String,
    },
    /// Concurrent writers kept winning the compare-and-swap.
    #[error("gave up after {attempts} conditional write attempts lost to concurrent writers")]
    TooManyConflicts {
        /// Attempts made.
        attempts: usize,
    },
    /// A version the backend reported cannot be compared (no ETag and no generation).
    #[error("{store} reported object `{path}` without an ETag or a version to compare")]
    NoVersion {
        /// The store, as object_store names it.
        store: String,
        /// The object's path.
        path: String,
    },
    /// What object_store answered.
    #[error("object_store: {0}")]
    Store(#[source] object_store::Error),
}

impl ObjectStoreFenceError {
    /// Whether a retry can help: the class this failure reports as.
    pub fn kind(&self) -> BackendErrorKind {
        match self {
            ObjectStoreFenceError::ConditionsUnsupported { .. }
            | ObjectStoreFenceError::ConditionsIgnored { .. }
            | ObjectStoreFenceError::NoVersion { .. } => BackendErrorKind::Rejected,
            ObjectStoreFenceError::TooManyConflicts { .. } => BackendErrorKind::Contention,
            ObjectStoreFenceError::Store(error) => classify(error),
        }
    }
}

/// The class of an object_store error. `Generic` covers what its HTTP clients give on a
/// connection failure, a timeout or a server error, but also statuses some requests do not map
/// (Azure's list answers 403 as `Generic`): the HTTP status object_store quotes in the message
/// decides when there is one (401/403 denied, 404 not found, other 4xx but 408 and 429
/// rejected); otherwise it counts as retryable (unavailable).
fn classify(error: &object_store::Error) -> BackendErrorKind {
    use object_store::Error as E;
    match error {
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
            BackendErrorKind::PermissionDenied
        }
        E::NotFound { .. } => BackendErrorKind::NotFound,
        E::Generic { .. } => match quoted_status(error) {
            Some(401 | 403) => BackendErrorKind::PermissionDenied,
            Some(404) => BackendErrorKind::NotFound,
            Some(status) if (400..500).contains(&status) && status != 408 && status != 429 => {
                BackendErrorKind::Rejected
            }
            _ => BackendErrorKind::Unavailable,
        },
        _ => BackendErrorKind::Rejected,
    }
}

/// The HTTP status object_store's message quotes ("… status code: 403 Forbidden …"), anywhere
/// in the error's chain of sources.
fn quoted_status(error: &object_store::Error) -> Option<u16> {
    const MARK: &str = "status code: ";
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        let text = current.to_string();
        if let Some(at) = text.find(MARK) {
            let digits: String = text[at + MARK.len()..].chars().take(3).collect();
            if let Ok(status) = digits.parse() {
                return Some(status);
            }
        }
        source = current.source();
    }
    None
}

/// A backend error of `error`'s class.
pub(crate) fn backend_error(domain: Option<&Domain>, error: ObjectStoreFenceError) -> FenceError {
    FenceError::backend(BACKEND, error.kind(), domain, error)
}

/// A failed request of `operation`; `sent_write` says it was a conditional write that may have
/// been applied, which is `Ambiguous` when the failure leaves that unknown (no answer).
pub(crate) fn store_error(
    error: object_store::Error,
    domain: &Domain,
    operation: Operation,
    sent_write: bool,
) -> FenceError {
    let error = ObjectStoreFenceError::Store(error);
    if sent_write && error.kind() == BackendErrorKind::Unavailable {
        return FenceError::Ambiguous {
            domain: domain.clone(),
            operation,
            source: Box::new(error),
        };
    }
    backend_error(Some(domain), error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(message: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "MicrosoftAzure",
            source: message.to_owned().into(),
        }
    }

    #[test]
    fn a_generic_error_is_classified_by_the_status_it_quotes() {
        let denied = generic("Error performing list request: Server returned non-2xx status code: 403 Forbidden: <Error/>");
        assert_eq!(classify(&denied), BackendErrorKind::PermissionDenied);
        let throttled = generic("Server returned non-2xx status code: 429 Too Many Requests");
        assert_eq!(classify(&throttled), BackendErrorKind::Unavailable);
        let bad = generic("Server returned non-2xx status code: 400 Bad Request");
        assert_eq!(classify(&bad), BackendErrorKind::Rejected);
        let cut = generic("Error performing PUT: error sending request: connection reset");
        assert_eq!(classify(&cut), BackendErrorKind::Unavailable);
    }
}
