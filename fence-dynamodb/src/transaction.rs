//! Fenced transactions across your own items: one `TransactWriteItems` whose first action is
//! the conditional update of the domain's item (the acceptance rule and the version read,
//! raising the mark and remembering the op id) and whose other actions are yours. DynamoDB
//! applies all of them or none: a stale token writes nothing of yours.

use aws_sdk_dynamodb::types::{ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use fence_core::raw::cas::Step;
use fence_core::raw::pipeline::{decide_transaction, TransactionDecision};
use fence_core::raw::splitmix64;
use fence_core::{
    BackendErrorKind, Domain, FenceError, InvalidInput, Operation, Transacted, TransactionRequest,
};

use crate::error::{classify, DynamoDbFenceError, Failure};
use crate::expr::Expr;
use crate::fence::{ItemChange, Written};
use crate::item::{attr, number, tx_lines, Stored, TxRecord};
use crate::table::without_key;
use crate::{DynamoDb, DynamoDbFence};

/// The most actions of yours one fenced transaction holds (DynamoDB's limit is 100; the
/// domain's item takes one).
pub const MAX_TRANSACTION_ACTIONS: usize = 99;

/// A fenced transaction's own actions, checked.
#[derive(Clone, Debug)]
pub(crate) struct Actions {
    items: Vec<TransactWriteItem>,
    /// The `ClientRequestToken` base: from the op id, so a resent attempt is one transaction.
    op_key: Option<String>,
}

impl DynamoDbFence {
    /// Runs `actions` (your puts, updates, deletes and condition checks, on your own tables)
    /// in one DynamoDB transaction with the fence's check of `request`'s token: DynamoDB applies
    /// all of them and raises the domain's mark to the token, or applies none.
    ///
    /// - A token below the mark (at it, under the strict policy) is [`FenceError::Fenced`]
    ///   and nothing of yours is written, even when the refusal is found by DynamoDB itself
    ///   (a newer holder raised the mark between the read and the transaction).
    /// - A condition of one of your actions that fails, or an action DynamoDB refuses,
    ///   cancels the whole transaction: [`fence_core::BackendErrorKind::Rejected`] with a
    ///   [`DynamoDbFenceError::ActionCancelled`] source naming the action's index.
    /// - With an op id the transaction is remembered on the domain's item in the same
    ///   transaction: a retry after an ambiguous answer is [`Transacted::Duplicate`] and
    ///   writes nothing again. Each attempt is also sent with a `ClientRequestToken` made of
    ///   the op id and the state decided on, so DynamoDB applies a resent attempt once.
    /// - At most [`MAX_TRANSACTION_ACTIONS`] actions; none may touch Fence's table (its items
    ///   change only through Fence). Both are refused before any I/O.
    ///
    /// ```no_run
    /// # async fn run(fence: fence_dynamodb::DynamoDbFence, token: fence_core::FencingToken) -> Result<(), Box<dyn std::error::Error>> {
    /// use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
    /// use fence_core::{Domain, OperationId, TransactionRequest};
    /// let order = Put::builder()
    ///     .table_name("orders")
    ///     .item("id", AttributeValue::S("o-17".into()))
    ///     .item("state", AttributeValue::S("paid".into()))
    ///     .build()?;
    /// let request = TransactionRequest::new(Domain::new("orders/o-17")?, token)
    ///     .with_op_id(OperationId::new("pay o-17")?);
    /// fence.transact(&request, vec![TransactWriteItem::builder().put(order).build()]).await?;
    /// # Ok(()) }
    /// ```
    pub async fn transact(
        &self,
        request: &TransactionRequest,
        actions: Vec<TransactWriteItem>,
    ) -> Result<Transacted<()>, FenceError> {
        self.transact_salted(request, actions, "").await
    }

    /// [`DynamoDbFence::transact`], `salt` mixed into the `ClientRequestToken`: an extension
    /// whose actions depend on state it read (an outbox numbering its entries) names that
    /// state, so two attempts with other actions never share a token.
    pub(crate) async fn transact_salted(
        &self,
        request: &TransactionRequest,
        actions: Vec<TransactWriteItem>,
        salt: &str,
    ) -> Result<Transacted<()>, FenceError> {
        let domain = request.domain();
        let actions = self.checked(domain, request, actions, salt)?;
        let what = (Operation::Commit, request.token(), request.policy());
        self.decided(domain, what, |stored| {
            let first = request.op_id().and_then(|op_id| stored.stored_op(op_id));
            let bounds = self.bounds(stored);
            match decide_transaction(request, stored.mark, first.as_ref(), bounds)? {
                TransactionDecision::Replay {
                    previous_high_water_mark,
                } => Ok(Step::Done(Transacted::Duplicate {
                    previous_high_water_mark,
                })),
                TransactionDecision::Admit { .. } => {
                    let version = stored.version + 1;
                    let token = request.token();
                    let mut set = vec![
                        (attr::MARK, number(token.get())),
                        (attr::VER, number(version)),
                    ];
                    let mut tx_ops = stored.tx_ops.clone();
                    if let (Some(op_id), true) = (request.op_id(), self.op_id_retention > 0) {
                        tx_ops.push(TxRecord {
                            token,
                            previous: stored.mark,
                            op_id: op_id.clone(),
                        });
                        let excess = tx_ops.len().saturating_sub(self.op_id_retention);
                        tx_ops.drain(..excess);
                        set.push((attr::TX_OPS, tx_lines(&tx_ops)));
                    }
                    Ok(Step::Commit {
                        change: ItemChange {
                            set,
                            remove: Vec::new(),
                            next: Box::new(Stored {
                                mark: Some(token),
                                version,
                                tx_ops,
                                ..stored.without_value()
                            }),
                            with: Some(actions.clone()),
                        },
                        outcome: Transacted::Committed {
                            value: (),
                            previous_high_water_mark: stored.mark,
                        },
                    })
                }
            }
        })
        .await
    }

    /// Checks the caller's actions before any I/O.
    fn checked(
        &self,
        domain: &Domain,
        request: &TransactionRequest,
        items: Vec<TransactWriteItem>,
        salt: &str,
    ) -> Result<Actions, FenceError> {
        if items.len() > MAX_TRANSACTION_ACTIONS {
            return Err(InvalidInput::Configuration(format!(
                "a fenced transaction on domain `{domain}` holds at most {MAX_TRANSACTION_ACTIONS} actions of yours (DynamoDB's 100 less the fence's), got {}",
                items.len()
            ))
            .into());
        }
        for (index, item) in items.iter().enumerate() {
            if touches(item, self.dynamodb.table()) {
                return Err(InvalidInput::ReservedName {
                    domain: domain.clone(),
                    what: "transaction action on fence table",
                    name: format!("action {index}: {}", self.dynamodb.table()),
                }
                .into());
            }
        }
        Ok(Actions {
            items,
            op_key: request.op_id().map(|op_id| {
                format!(
                    "{}\n{}\n{}\n{salt}",
                    self.dynamodb.item_key(domain),
                    op_id.as_str(),
                    request.token()
                )
            }),
        })
    }

    /// Sends the domain item's update (`condition`, `update`) with the caller's actions.
    pub(crate) async fn transact_write(
        &self,
        domain: &Domain,
        known: &Stored,
        (condition, update, expr): (String, String, Expr),
        actions: &Actions,
    ) -> Result<Written, FenceError> {
        let dynamodb: &DynamoDb = &self.dynamodb;
        let fence_action = Update::builder()
            .table_name(dynamodb.table())
            .set_key(Some(dynamodb.key(domain)))
            .condition_expression(condition)
            .update_expression(update)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| {
                crate::error::backend_error(
                    Some(domain),
                    DynamoDbFenceError::Unexpected(e.to_string()),
                )
            })?;
        let mut items = Vec::with_capacity(actions.items.len() + 1);
        items.push(TransactWriteItem::builder().update(fence_action).build());
        items.extend(actions.items.iter().cloned());
        let token = actions
            .op_key
            .as_ref()
            .map(|key| request_token(&format!("{key}\n{}", known.version)));
        let sent = dynamodb
            .client()
            .transact_write_items()
            .set_transact_items(Some(items))
            .set_client_request_token(token)
            .send()
            .await;
        let failure = match sent {
            Ok(_) => return Ok(Written::Applied),
            Err(error) => classify(error, dynamodb.table()),
        };
        match failure {
            Failure::Cancelled(reasons) => cancelled(domain, reasons),
            // Another attempt with this op id and state, with other actions or another token,
            // is known to DynamoDB: it may have applied, or may yet.
            Failure::Refused(DynamoDbFenceError::Service { code, message })
                if code == "IdempotentParameterMismatchException" =>
            {
                Err(
                    Failure::MaybeApplied(DynamoDbFenceError::Service { code, message })
                        .into_fence_error(domain, Operation::Commit, true),
                )
            }
            Failure::NotApplied(source) => Ok(Written::NotApplied(source)),
            other => Err(other.into_fence_error(domain, Operation::Commit, true)),
        }
    }
}

/// What a cancelled transaction's reasons say: the fence's own update lost (the item
/// changed: decide again on it), DynamoDB did nothing for a reason a retry can help, or one
/// of the caller's actions cancelled it.
fn cancelled(domain: &Domain, reasons: Vec<crate::error::Reason>) -> Result<Written, FenceError> {
    let mut reasons = reasons.into_iter();
    let fence_reason = reasons.next();
    if let Some(reason) = &fence_reason {
        match reason.code.as_str() {
            "ConditionalCheckFailed" => {
                let now = reason
                    .item
                    .clone()
                    .map(|item| Stored::decode(domain, Some(&without_key(item))))
                    .transpose()?;
                return Ok(Written::Changed(now));
            }
            "None" | "" => {}
            code => {
                return Ok(Written::NotApplied(retry_or_refuse(
                    domain,
                    code,
                    &reason.message,
                    0,
                )?))
            }
        }
    }
    for (index, reason) in reasons.enumerate() {
        match reason.code.as_str() {
            "None" | "" => {}
            code => {
                return Ok(Written::NotApplied(retry_or_refuse(
                    domain,
                    code,
                    &reason.message,
                    index + 1,
                )?))
            }
        }
    }
    Err(crate::error::backend_error(
        Some(domain),
        DynamoDbFenceError::Unexpected(format!(
            "a transaction cancelled without a reason (fence's: {:?})",
            fence_reason.map(|r| r.code)
        )),
    ))
}

/// A cancellation reason of action `position` (0: the fence's own update): a retryable one (a
/// conflict with another transaction, throttling) as the loss to retry after, any other as
/// an error naming the action.
fn retry_or_refuse(
    domain: &Domain,
    code: &str,
    message: &str,
    position: usize,
) -> Result<DynamoDbFenceError, FenceError> {
    let (code, message) = (code.to_owned(), message.to_owned());
    let error = match position.checked_sub(1) {
        None => DynamoDbFenceError::ItemCancelled { code, message },
        // The caller counts their own actions from 0.
        Some(action) => DynamoDbFenceError::ActionCancelled {
            action,
            code,
            message,
        },
    };
    // Nothing was written, and another attempt may go through.
    if matches!(
        error.kind(),
        BackendErrorKind::Unavailable | BackendErrorKind::Contention
    ) {
        Ok(error)
    } else {
        Err(crate::error::backend_error(Some(domain), error))
    }
}

/// A `ClientRequestToken` (36 characters at most) for `key`: two 64-bit mixes as hex.
fn request_token(key: &str) -> String {
    let (mut a, mut b) = (0x9e37_79b9_7f4a_7c15_u64, 0x6a09_e667_f3bc_c909_u64);
    for byte in key.bytes() {
        a = splitmix64(a ^ u64::from(byte));
        b = splitmix64(b.rotate_left(5) ^ u64::from(byte));
    }
    format!("{a:016x}{b:016x}")
}

/// Whether `item` writes (or checks) an item of Fence's `table`, named or by its ARN: Fence's
/// items change only through Fence.
fn touches(item: &TransactWriteItem, table: &str) -> bool {
    let names = [
        item.put().map(|p| p.table_name()),
        item.update().map(|u| u.table_name()),
        item.delete().map(|d| d.table_name()),
        item.condition_check().map(|c| c.table_name()),
    ];
    let arn = format!(":table/{table}");
    names
        .into_iter()
        .flatten()
        .any(|name| name == table || name.ends_with(&arn))
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use crate::error::Reason;

    fn d() -> Domain {
        Domain::new("orders").unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn reason(code: &str) -> Reason {
        Reason {
            code: code.to_owned(),
            message: format!("{code} happened"),
            item: None,
        }
    }

    #[test]
    fn cancellation_reasons_name_the_callers_action_or_ask_for_a_retry() {
        // The fence's own condition: the item changed, decide again.
        assert!(matches!(
            cancelled(&d(), vec![reason("ConditionalCheckFailed"), reason("None")]),
            Ok(Written::Changed(None))
        ));
        // The caller's second action's condition failed: their error, naming it.
        match cancelled(
            &d(),
            vec![
                reason("None"),
                reason("None"),
                reason("ConditionalCheckFailed"),
            ],
        ) {
            Err(error) => {
                assert_eq!(
                    error.backend_kind(),
                    Some(fence_core::BackendErrorKind::Rejected)
                );
                assert!(error.to_string().contains("orders"), "{error}");
                let source = std::error::Error::source(&error)
                    .and_then(|s| s.downcast_ref::<DynamoDbFenceError>());
                assert!(
                    matches!(
                        source,
                        Some(DynamoDbFenceError::ActionCancelled { action: 1, .. })
                    ),
                    "{source:?}"
                );
            }
            other => panic!("{:?}", other.is_ok()),
        }
        // Conflicts and throttling on any action: nothing was written, retry.
        for code in [
            "TransactionConflict",
            "ThrottlingError",
            "ProvisionedThroughputExceeded",
        ] {
            for reasons in [
                vec![reason(code), reason("None")],
                vec![reason("None"), reason(code)],
            ] {
                assert!(
                    matches!(cancelled(&d(), reasons), Ok(Written::NotApplied(_))),
                    "{code}"
                );
            }
        }
        // Which action a refusal names: the fence's own update is the domain's item, the
        // caller's count from 0.
        let source_of = |reasons| match cancelled(&d(), reasons) {
            Err(error) => format!("{:?}", std::error::Error::source(&error)),
            Ok(_) => panic!("a validation error is not retried"),
        };
        assert!(
            source_of(vec![reason("ValidationError"), reason("None")]).contains("ItemCancelled")
        );
        assert!(source_of(vec![reason("None"), reason("ValidationError")])
            .contains("ActionCancelled { action: 0"));
        match cancelled(&d(), vec![reason("TransactionConflict"), reason("None")]) {
            Ok(Written::NotApplied(DynamoDbFenceError::ItemCancelled { code, .. })) => {
                assert_eq!(code, "TransactionConflict")
            }
            other => panic!("{:?}", other.is_ok()),
        }
        // A reason-less cancellation is not guessed at.
        assert!(cancelled(&d(), vec![reason("None"), reason("None")]).is_err());
    }

    #[test]
    fn request_tokens_fit_dynamodb_and_differ_by_state() {
        let a = request_token("ns/orders\npay\n1");
        assert!(
            a.len() <= 36 && a.bytes().all(|b| b.is_ascii_hexdigit()),
            "{a}"
        );
        assert_ne!(a, request_token("ns/orders\npay\n2"));
        assert_eq!(a, request_token("ns/orders\npay\n1"));
    }
}
