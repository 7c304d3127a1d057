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

/// The class of an object_store error. `Generic` covers what its HTTP clients give once their
/// own retries are spent on a connection failure, a timeout or a server error, but also any
/// status it does not map and some refusals made before sending: counted as retryable
/// (unavailable), since the cases cannot be told apart from outside object_store.
fn classify(error: &object_store::Error) -> BackendErrorKind {
    use object_store::Error as E;
    match error {
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
            BackendErrorKind::PermissionDenied
        }
        E::NotFound { .. } => BackendErrorKind::NotFound,
        E::Generic { .. } => BackendErrorKind::Unavailable,
        _ => BackendErrorKind::Rejected,
    }
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
