//! DynamoDB errors, and the ONE function that classifies every error code and transport failure.

use std::error::Error as StdError;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::http::Response;
use fence_core::{BackendErrorKind, BoxError, Domain, FenceError, Operation};

/// The backend's name in errors and metrics.
pub const BACKEND: &str = "dynamodb";

/// What went wrong at DynamoDB: the `source` of [`FenceError::Backend`] and
/// [`FenceError::Ambiguous`], so callers can downcast and match it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DynamoDbFenceError {
    /// Credentials were refused or lack a permission.
    #[error("dynamodb: access denied ({code}): check the credentials and the IAM policy")]
    AccessDenied {
        /// DynamoDB's error code (`AccessDeniedException`, `UnrecognizedClientException`, …).
        code: String,
    },
    /// The table does not exist (or is not `ACTIVE`).
    #[error("dynamodb: table `{table}` not found (create it: see the crate docs)")]
    TableNotFound {
        /// The table.
        table: String,
    },
    /// DynamoDB cancelled a fenced transaction because of one of the caller's own actions
    /// (its condition failed, or the action itself was refused): nothing was written.
    #[error("dynamodb: the transaction was cancelled by your action {action} ({code}): nothing was written")]
    ActionCancelled {
        /// The index of the action in the list the caller gave (0: the first).
        action: usize,
        /// DynamoDB's cancellation reason (`ConditionalCheckFailed`, `ValidationError`, …).
        code: String,
        /// Its message, if any.
        message: String,
    },
    /// DynamoDB cancelled a fenced transaction at the fence's own update of the domain's item
    /// for a reason other than its condition (a conflict with another transaction, throttling):
    /// nothing was written.
    #[error("dynamodb: the transaction was cancelled at the domain's item ({code}): nothing was written")]
    ItemCancelled {
        /// DynamoDB's cancellation reason.
        code: String,
        /// Its message, if any.
        message: String,
    },
    /// DynamoDB throttled the request; nothing was done.
    #[error("dynamodb: throttled ({code}); nothing was written")]
    Throttled {
        /// DynamoDB's error code.
        code: String,
    },
    /// Concurrent writers changed the domain's item between every read and conditional write.
    #[error("dynamodb: the domain's item changed under {attempts} consecutive conditional writes")]
    Contention {
        /// How many attempts were made.
        attempts: u32,
    },
    /// Any other answer from DynamoDB.
    #[error("dynamodb answered {code}: {message}")]
    Service {
        /// DynamoDB's error code.
        code: String,
        /// Its message.
        message: String,
    },
    /// DynamoDB answered in a way the protocol does not allow.
    #[error("dynamodb: unexpected answer: {0}")]
    Unexpected(String),
    /// The request could not be sent or its answer not read.
    #[error("dynamodb request failed: {0}")]
    Transport(#[source] BoxError),
}

impl DynamoDbFenceError {
    /// Whether a retry can help: the class this failure reports as.
    pub fn kind(&self) -> BackendErrorKind {
        match self {
            DynamoDbFenceError::AccessDenied { .. } => BackendErrorKind::PermissionDenied,
            DynamoDbFenceError::TableNotFound { .. } => BackendErrorKind::NotFound,
            DynamoDbFenceError::Throttled { .. } | DynamoDbFenceError::Transport(_) => {
                BackendErrorKind::Unavailable
            }
            DynamoDbFenceError::Contention { .. } => BackendErrorKind::Contention,
            DynamoDbFenceError::ActionCancelled { code, .. }
            | DynamoDbFenceError::ItemCancelled { code, .. } => match code.as_str() {
                "TransactionConflict" => BackendErrorKind::Contention,
                "ThrottlingError" | "ProvisionedThroughputExceeded" => {
                    BackendErrorKind::Unavailable
                }
                _ => BackendErrorKind::Rejected,
            },
            DynamoDbFenceError::Service { code, .. } => service_kind(code),
            DynamoDbFenceError::Unexpected(_) => BackendErrorKind::Rejected,
        }
    }
}

/// The class of a service error code that reached no decision on an item.
fn service_kind(code: &str) -> BackendErrorKind {
    match code {
        "TransactionConflictException" | "TransactionInProgressException" => {
            BackendErrorKind::Contention
        }
        "InternalServerError" | "ServiceUnavailable" | "ReplicatedWriteConflictException" => {
            BackendErrorKind::Unavailable
        }
        _ => BackendErrorKind::Rejected,
    }
}

/// How a failed request ended.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The request's condition was false: DynamoDB changed nothing. The item as it is now
    /// when DynamoDB returned it (`ReturnValuesOnConditionCheckFailure`).
    Condition(Option<crate::item::RawItem>),
    /// A transaction was cancelled: one reason per action, in order.
    Cancelled(Vec<Reason>),
    /// Nothing was done and a retry can help (throttling, a conflict with another
    /// transaction, a connection that was never made).
    NotApplied(DynamoDbFenceError),
    /// The request may have been applied: a timeout, a cut connection, a server error.
    MaybeApplied(DynamoDbFenceError),
    /// A definite refusal.
    Refused(DynamoDbFenceError),
    /// What Fence itself found in an answer (a corrupt item, an exhausted counter).
    Fence(FenceError),
}

/// One cancellation reason of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Reason {
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) item: Option<crate::item::RawItem>,
}

/// What an operation's error carries beyond its code: a failed condition's item, a cancelled
/// transaction's reasons. Implemented for the operations Fence sends.
pub(crate) trait Detail {
    fn condition_item(&self) -> Option<Option<crate::item::RawItem>> {
        None
    }
    fn reasons(&self) -> Option<Vec<Reason>> {
        None
    }
}

/// Classifies any SDK error of a request on `table`: every code DynamoDB answers is mapped
/// here and nowhere else.
pub(crate) fn classify<E>(error: SdkError<E, Response>, table: &str) -> Failure
where
    E: ProvideErrorMetadata + Detail + StdError + Send + Sync + 'static,
{
    classify_with(error, table, |err| {
        err.condition_item()
            .map(Failure::Condition)
            .or_else(|| err.reasons().map(Failure::Cancelled))
    })
}

/// [`classify`], the operation's own detail (a failed condition's item, a cancelled
/// transaction's reasons) read by `detail`.
pub(crate) fn classify_with<E>(
    error: SdkError<E, Response>,
    table: &str,
    detail: impl FnOnce(&E) -> Option<Failure>,
) -> Failure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    match error {
        SdkError::ServiceError(context) => {
            let err = context.err();
            if let Some(failure) = detail(err) {
                return failure;
            }
            let status = context.raw().status().as_u16();
            classify_code(
                err.code().unwrap_or_default(),
                err.message().unwrap_or_default(),
                status,
                table,
            )
        }
        SdkError::ConstructionFailure(_) => {
            Failure::NotApplied(DynamoDbFenceError::Transport(Box::new(error)))
        }
        SdkError::DispatchFailure(_) if fence_core::raw::refused_connection(&error) => {
            Failure::NotApplied(DynamoDbFenceError::Transport(Box::new(error)))
        }
        other => Failure::MaybeApplied(DynamoDbFenceError::Transport(Box::new(other))),
    }
}

/// Classifies an error code (with the HTTP status it came with).
pub(crate) fn classify_code(code: &str, message: &str, status: u16, table: &str) -> Failure {
    let service = || DynamoDbFenceError::Service {
        code: code.to_owned(),
        message: message.to_owned(),
    };
    match code {
        "ConditionalCheckFailedException" => Failure::Condition(None),
        "ProvisionedThroughputExceededException"
        | "ThrottlingException"
        | "RequestLimitExceeded"
        | "LimitExceededException" => Failure::NotApplied(DynamoDbFenceError::Throttled {
            code: code.to_owned(),
        }),
        // Another transaction holds the item: nothing of this request was applied.
        "TransactionConflictException" => Failure::NotApplied(service()),
        // A transaction with this request token is still running: it may yet apply.
        "TransactionInProgressException" => Failure::MaybeApplied(service()),
        "ResourceNotFoundException" => Failure::Refused(DynamoDbFenceError::TableNotFound {
            table: table.to_owned(),
        }),
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "MissingAuthenticationTokenException"
        | "ExpiredTokenException"
        | "IncompleteSignatureException" => Failure::Refused(DynamoDbFenceError::AccessDenied {
            code: code.to_owned(),
        }),
        "InternalServerError" | "ServiceUnavailable" => Failure::MaybeApplied(service()),
        _ if status >= 500 => Failure::MaybeApplied(service()),
        _ => Failure::Refused(service()),
    }
}

impl Failure {
    /// The fence error for a failure the operation does not handle itself; `mutating`: the
    /// request could have changed the item, so an unknown outcome is `Ambiguous`.
    pub(crate) fn into_fence_error(
        self,
        domain: &Domain,
        operation: Operation,
        mutating: bool,
    ) -> FenceError {
        let source = match self {
            Failure::Fence(error) => return error,
            Failure::MaybeApplied(source) if mutating => {
                return FenceError::Ambiguous {
                    domain: domain.clone(),
                    operation,
                    source: Box::new(source),
                }
            }
            Failure::MaybeApplied(source)
            | Failure::NotApplied(source)
            | Failure::Refused(source) => source,
            Failure::Condition(_) => DynamoDbFenceError::Unexpected(
                "a condition failed on a request that had none".into(),
            ),
            Failure::Cancelled(reasons) => DynamoDbFenceError::Unexpected(format!(
                "a transaction cancelled with reasons {:?}",
                reasons.iter().map(|r| r.code.as_str()).collect::<Vec<_>>()
            )),
        };
        backend_error(Some(domain), source)
    }
}

/// The [`FenceError::Backend`] for `source`, classified by [`DynamoDbFenceError::kind`].
pub(crate) fn backend_error(domain: Option<&Domain>, source: DynamoDbFenceError) -> FenceError {
    FenceError::backend(BACKEND, source.kind(), domain, source)
}

/// State at the resource that is not Fence's, or is damaged.
pub(crate) fn corrupt(domain: &Domain, detail: impl Into<String>) -> FenceError {
    FenceError::corrupt(BACKEND, domain, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified_and_unknown_outcomes_are_ambiguous() {
        let d = Domain::new("d").unwrap_or_else(|e| unreachable!("{e}"));
        let cases = [
            (
                "ThrottlingException",
                400,
                Some(BackendErrorKind::Unavailable),
            ),
            (
                "ProvisionedThroughputExceededException",
                400,
                Some(BackendErrorKind::Unavailable),
            ),
            (
                "RequestLimitExceeded",
                400,
                Some(BackendErrorKind::Unavailable),
            ),
            (
                "TransactionConflictException",
                400,
                Some(BackendErrorKind::Contention),
            ),
            (
                "ResourceNotFoundException",
                400,
                Some(BackendErrorKind::NotFound),
            ),
            (
                "AccessDeniedException",
                400,
                Some(BackendErrorKind::PermissionDenied),
            ),
            (
                "UnrecognizedClientException",
                400,
                Some(BackendErrorKind::PermissionDenied),
            ),
            ("ValidationException", 400, Some(BackendErrorKind::Rejected)),
            (
                "IdempotentParameterMismatchException",
                400,
                Some(BackendErrorKind::Rejected),
            ),
            // Sent, and no answer that says it was refused: the outcome is unknown.
            ("InternalServerError", 500, None),
            ("ServiceUnavailable", 503, None),
            ("SomethingNew", 502, None),
            ("TransactionInProgressException", 400, None),
        ];
        for (code, status, kind) in cases {
            let error =
                classify_code(code, "m", status, "t").into_fence_error(&d, Operation::Write, true);
            match kind {
                Some(kind) => assert_eq!(error.backend_kind(), Some(kind), "{code}: {error}"),
                None => assert!(
                    matches!(error, FenceError::Ambiguous { .. }),
                    "{code}: {error}"
                ),
            }
        }
        // The same failures of a read are never ambiguous, and a retry can help.
        let read = classify_code("InternalServerError", "m", 500, "t").into_fence_error(
            &d,
            Operation::Read,
            false,
        );
        assert!(read.is_retryable(), "{read}");
        let refused = classify_code("ResourceNotFoundException", "m", 400, "orders")
            .into_fence_error(&d, Operation::Read, false);
        assert!(
            refused.to_string().contains("orders") || format!("{refused:?}").contains("orders")
        );
        assert!(!refused.is_retryable());
    }
}

mod details {
    use aws_sdk_dynamodb::operation::create_table::CreateTableError;
    use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
    use aws_sdk_dynamodb::operation::describe_table::DescribeTableError;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;
    use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

    use super::{Detail, Reason};
    use crate::item::RawItem;

    impl Detail for UpdateItemError {
        fn condition_item(&self) -> Option<Option<RawItem>> {
            match self {
                UpdateItemError::ConditionalCheckFailedException(e) => Some(e.item().cloned()),
                _ => None,
            }
        }
    }

    impl Detail for TransactWriteItemsError {
        fn reasons(&self) -> Option<Vec<Reason>> {
            match self {
                TransactWriteItemsError::TransactionCanceledException(e) => Some(
                    e.cancellation_reasons()
                        .iter()
                        .map(|r| Reason {
                            code: r.code().unwrap_or_default().to_owned(),
                            message: r.message().unwrap_or_default().to_owned(),
                            item: r.item().cloned(),
                        })
                        .collect(),
                ),
                _ => None,
            }
        }
    }

    impl Detail for DeleteItemError {
        fn condition_item(&self) -> Option<Option<RawItem>> {
            match self {
                DeleteItemError::ConditionalCheckFailedException(e) => Some(e.item().cloned()),
                _ => None,
            }
        }
    }

    impl Detail for GetItemError {}
    impl Detail for CreateTableError {}
    impl Detail for DescribeTableError {}
}
