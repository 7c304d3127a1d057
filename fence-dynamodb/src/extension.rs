//! Building blocks for crates built on fence-dynamodb (such as fence-outbox-dynamodb): this
//! backend's one error classification, its number codec, fenced transactions whose request
//! token names the state an extension's actions were built from, and table creation, so an
//! extension adds no copy of them. Unstable, behind the `unstable-raw` feature: may change in
//! any release.

use std::collections::HashMap;
use std::error::Error as StdError;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use aws_smithy_runtime_api::http::Response;
use fence_core::{Domain, FenceError, Operation, Transacted, TransactionRequest};

pub use crate::error::BACKEND;
use crate::error::{classify, classify_with, Failure};
pub use crate::expr::Expr;
use crate::DynamoDbFence;

/// An item as the SDK returns it.
pub type Item = HashMap<String, AttributeValue>;

/// A number attribute holding `n` exactly (canonical decimal).
pub fn number(n: u64) -> AttributeValue {
    crate::item::number(n)
}

/// A string attribute.
pub fn text(s: impl Into<String>) -> AttributeValue {
    crate::item::text(s)
}

/// The count a number attribute holds (`0` included), or `None` when it is absent, not a
/// number or not a canonical u64: the caller reports the item corrupt.
///
/// ```
/// use fence_dynamodb::extension::{count_of, number};
/// assert_eq!(count_of(Some(&number(u64::MAX))), Some(u64::MAX));
/// assert_eq!(count_of(Some(&number(0))), Some(0));
/// let sloppy = fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue::N("007".into());
/// assert_eq!(count_of(Some(&sloppy)), None);
/// ```
pub fn count_of(value: Option<&AttributeValue>) -> Option<u64> {
    match value? {
        AttributeValue::N(n) if n == "0" => Some(0),
        AttributeValue::N(n) => fence_core::raw::parse_count(n),
        _ => None,
    }
}

/// How a conditional request of an extension ended when it did not succeed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Refusal {
    /// Its condition was false: nothing changed. The item as it is now, when DynamoDB
    /// returned it (`ReturnValuesOnConditionCheckFailure::AllOld`).
    Condition(Option<Item>),
    /// A transaction was cancelled, nothing written: one reason per action, in order.
    Cancelled(Vec<CancelReason>),
    /// Any other failure, as the fence error about the domain (`Ambiguous` when a mutating
    /// request may have applied).
    Failed(FenceError),
}

/// Why DynamoDB cancelled one action of a transaction.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CancelReason {
    /// DynamoDB's code: `None` for an action that did not cancel it, `ConditionalCheckFailed`,
    /// `TransactionConflict`, …
    pub code: String,
    /// The action's item as it is now, when its condition failed and DynamoDB returned it.
    pub item: Option<Item>,
}

impl CancelReason {
    /// True when this action's condition was false.
    pub fn condition_failed(&self) -> bool {
        self.code == "ConditionalCheckFailed"
    }
}

/// The error for a transaction DynamoDB cancelled for a reason other than a condition (the
/// first such reason: a conflict with another transaction and throttling are retryable, any
/// other is not), classified as fence-dynamodb classifies its own; an unexpected answer when
/// no action gives one.
pub fn cancellation(domain: &Domain, reasons: &[CancelReason]) -> FenceError {
    let reason = reasons
        .iter()
        .find(|r| !matches!(r.code.as_str(), "None" | "" | "ConditionalCheckFailed"));
    let source = match reason {
        Some(reason) => crate::DynamoDbFenceError::ItemCancelled {
            code: reason.code.clone(),
            message: String::new(),
        },
        None => {
            crate::DynamoDbFenceError::Unexpected("a transaction cancelled without a reason".into())
        }
    };
    crate::error::backend_error(Some(domain), source)
}

/// The refusal of a conditional `UpdateItem` on `table` about `domain`.
pub fn update_refusal(
    error: SdkError<UpdateItemError, Response>,
    table: &str,
    domain: &Domain,
    operation: Operation,
) -> Refusal {
    refusal(classify(error, table), domain, operation)
}

/// The refusal of a conditional `DeleteItem` on `table` about `domain`.
pub fn delete_refusal(
    error: SdkError<DeleteItemError, Response>,
    table: &str,
    domain: &Domain,
    operation: Operation,
) -> Refusal {
    refusal(classify(error, table), domain, operation)
}

/// The refusal of a `TransactWriteItems` about `domain` (`table`: the one named in errors).
pub fn transaction_refusal(
    error: SdkError<TransactWriteItemsError, Response>,
    table: &str,
    domain: &Domain,
    operation: Operation,
) -> Refusal {
    refusal(classify(error, table), domain, operation)
}

/// The fence error for any other failed request on `table` about `domain` (a read, a query, a
/// scan, an unconditional write); `mutating`: it could have changed something, so an unknown
/// outcome is `Ambiguous`.
pub fn failure<E>(
    error: SdkError<E, Response>,
    table: &str,
    domain: &Domain,
    operation: Operation,
    mutating: bool,
) -> FenceError
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    classify_with(error, table, |_| None).into_fence_error(domain, operation, mutating)
}

fn refusal(failure: Failure, domain: &Domain, operation: Operation) -> Refusal {
    match failure {
        Failure::Condition(item) => Refusal::Condition(item),
        Failure::Cancelled(reasons) => Refusal::Cancelled(
            reasons
                .into_iter()
                .map(|r| CancelReason {
                    code: r.code,
                    item: r.item,
                })
                .collect(),
        ),
        other => Refusal::Failed(other.into_fence_error(domain, operation, true)),
    }
}

/// [`DynamoDbFence::transact`] whose `ClientRequestToken` also names `state`: what the
/// extension read to build `actions` (an outbox's last entry number), so that attempts with
/// other actions never share a token (DynamoDB would answer a reused token with other
/// actions `IdempotentParameterMismatch`, an `Ambiguous` outcome).
pub async fn transact_naming_state(
    fence: &DynamoDbFence,
    request: &TransactionRequest,
    actions: Vec<TransactWriteItem>,
    state: &str,
) -> Result<Transacted<()>, FenceError> {
    fence.transact_salted(request, actions, state).await
}

/// Sends `request`, a `CreateTable` of `table` built by the extension, and waits until the
/// table is `ACTIVE`, as [`crate::DynamoDb::create_table`] does.
pub async fn create_table(
    client: &Client,
    request: CreateTableFluentBuilder,
    table: &str,
) -> Result<(), FenceError> {
    crate::table::create_table(client, request, table).await
}
