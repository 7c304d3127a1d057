//! Fenced transactions on DynamoDB (moto in the test command): your own items written with the
//! fence's check in one `TransactWriteItems`, all or nothing; a stale token writes nothing of
//! yours, even when DynamoDB finds it stale; your failed condition is named; op ids replay; and
//! a race of writers with mixed tokens leaves a history the rule allows.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use fence_conformance::services::domain as d;
use fence_core::{
    BackendErrorKind, Fence, FenceError, FencingToken, InvalidInput, TokenIssuer, Transacted,
    TransactionRequest,
};
use fence_dynamodb::aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use fence_dynamodb::{DynamoDb, DynamoDbFence, DynamoDbFenceError, MAX_TRANSACTION_ACTIONS};
use fence_testkit::dynamodb::{another_client, raw_item, shared, unique_table};

fn t(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn s(text: &str) -> AttributeValue {
    AttributeValue::S(text.into())
}

/// The caller's own table, beside Fence's (same partition key name, any would do).
async fn own_table(dynamodb: &DynamoDb) -> DynamoDb {
    let own = DynamoDb::new(dynamodb.client().clone(), unique_table("own"), "unused").unwrap();
    own.create_table().await.unwrap();
    own
}

/// Puts `order` with `state`, and appends `token` to the ledger's history (raising its count).
fn order_and_ledger(table: &str, order: &str, state: &str, token: u64) -> Vec<TransactWriteItem> {
    let put = Put::builder()
        .table_name(table)
        .item("pk", s(order))
        .item("state", s(state))
        .build()
        .unwrap();
    let ledger = Update::builder()
        .table_name(table)
        .key("pk", s("ledger"))
        .update_expression("SET hist = list_append(if_not_exists(hist, :empty), :t) ADD n :one")
        .expression_attribute_values(":empty", AttributeValue::L(vec![]))
        .expression_attribute_values(
            ":t",
            AttributeValue::L(vec![AttributeValue::N(token.to_string())]),
        )
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .build()
        .unwrap();
    vec![
        TransactWriteItem::builder().put(put).build(),
        TransactWriteItem::builder().update(ledger).build(),
    ]
}

async fn history(own: &DynamoDb) -> Vec<u64> {
    match raw_item(own, "ledger")
        .await
        .and_then(|i| i.get("hist").cloned())
    {
        Some(AttributeValue::L(list)) => list
            .iter()
            .map(|v| match v {
                AttributeValue::N(n) => n.parse().unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        None => Vec::new(),
        other => panic!("{other:?}"),
    }
}

async fn state_of(own: &DynamoDb, order: &str) -> Option<String> {
    raw_item(own, order)
        .await
        .and_then(|i| match i.get("state") {
            Some(AttributeValue::S(state)) => Some(state.clone()),
            _ => None,
        })
}

#[tokio::test]
async fn a_stale_token_writes_nothing_of_yours() {
    let Some(dynamodb) = shared("tx_stale").await else {
        return;
    };
    let own = own_table(&dynamodb).await;
    let (fence, domain) = (dynamodb.fence(), d("orders/o-1"));
    let done = fence
        .transact(
            &TransactionRequest::new(domain.clone(), t(5)),
            order_and_ledger(own.table(), "o-1", "paid", 5),
        )
        .await
        .unwrap();
    assert_eq!(
        done,
        Transacted::Committed {
            value: (),
            previous_high_water_mark: None
        }
    );
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(5)));

    // A newer holder commits through another process; the old one, deciding on what it last
    // saw (token 5 admitted), is refused by DynamoDB's condition and decides again: Fenced.
    let newer = another_client(&dynamodb).fence();
    newer
        .transact(
            &TransactionRequest::new(domain.clone(), t(6)),
            order_and_ledger(own.table(), "o-1", "shipped", 6),
        )
        .await
        .unwrap();
    match fence
        .transact(
            &TransactionRequest::new(domain.clone(), t(5)),
            order_and_ledger(own.table(), "o-1", "refunded", 5),
        )
        .await
    {
        Err(FenceError::Fenced {
            presented, current, ..
        }) => assert_eq!((presented, current), (t(5), t(6))),
        other => panic!("a stale holder's transaction: {other:?}"),
    }
    assert_eq!(state_of(&own, "o-1").await.as_deref(), Some("shipped"));
    assert_eq!(history(&own).await, [5, 6]);

    // Under the strict policy the mark's own token is refused too.
    let strict = TransactionRequest::new(domain.clone(), t(6))
        .with_policy(fence_core::EqualTokenPolicy::Strict);
    assert!(matches!(
        newer
            .transact(&strict, order_and_ledger(own.table(), "o-1", "again", 6))
            .await,
        Err(FenceError::Fenced { .. })
    ));
    assert_eq!(history(&own).await, [5, 6]);
}

#[tokio::test]
async fn tokens_compare_exactly_at_the_doubles_edge_and_u64_max() {
    let Some(dynamodb) = shared("tx_exact").await else {
        return;
    };
    let own = own_table(&dynamodb).await;
    let (fence, domain) = (dynamodb.fence(), d("exact"));
    let edge = 1_u64 << 53;
    for token in [edge, edge + 1, 1 << 63, u64::MAX - 1, u64::MAX] {
        fence
            .transact(
                &TransactionRequest::new(domain.clone(), t(token)),
                order_and_ledger(own.table(), "o", "x", token),
            )
            .await
            .unwrap_or_else(|e| panic!("{token}: {e}"));
    }
    // A fresh client reads DynamoDB's numbers back and fence-core decides on them: exact at the
    // edges (the condition's own copy of the rule is checked alone in `expr`'s unit test).
    let fresh = another_client(&dynamodb).fence();
    for (stale, current) in [
        (u64::MAX - 1, u64::MAX),
        (edge + 1, u64::MAX),
        (edge, u64::MAX),
    ] {
        match fresh
            .transact(
                &TransactionRequest::new(domain.clone(), t(stale)),
                order_and_ledger(own.table(), "o", "stale", stale),
            )
            .await
        {
            Err(FenceError::Fenced {
                presented,
                current: c,
                ..
            }) => assert_eq!((presented, c), (t(stale), t(current))),
            other => panic!("{stale}: {other:?}"),
        }
    }
    assert_eq!(
        history(&own).await,
        [edge, edge + 1, 1 << 63, u64::MAX - 1, u64::MAX]
    );
}

#[tokio::test]
async fn your_failed_condition_cancels_everything_and_is_named() {
    let Some(dynamodb) = shared("tx_condition").await else {
        return;
    };
    let own = own_table(&dynamodb).await;
    let (fence, domain) = (dynamodb.fence(), d("cond"));
    fence
        .transact(
            &TransactionRequest::new(domain.clone(), t(1)),
            order_and_ledger(own.table(), "o-1", "new", 1),
        )
        .await
        .unwrap();
    // The second action requires an order that does not exist yet: o-1 does.
    let mut actions = order_and_ledger(own.table(), "o-2", "new", 2);
    actions.push(
        TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(own.table())
                    .item("pk", s("o-1"))
                    .item("state", s("overwritten"))
                    .condition_expression("attribute_not_exists(pk)")
                    .build()
                    .unwrap(),
            )
            .build(),
    );
    let error = fence
        .transact(&TransactionRequest::new(domain.clone(), t(2)), actions)
        .await
        .unwrap_err();
    assert_eq!(
        error.backend_kind(),
        Some(BackendErrorKind::Rejected),
        "{error}"
    );
    assert!(!error.is_retryable(), "{error}");
    let source =
        std::error::Error::source(&error).and_then(|s| s.downcast_ref::<DynamoDbFenceError>());
    match source {
        Some(DynamoDbFenceError::ActionCancelled { action, code, .. }) => {
            assert_eq!((*action, code.as_str()), (2, "ConditionalCheckFailed"))
        }
        other => panic!("{other:?}"),
    }
    // Nothing was written: not the mark, not the ledger, not o-2.
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(1)));
    assert_eq!(history(&own).await, [1]);
    assert_eq!(state_of(&own, "o-2").await, None);
    assert_eq!(state_of(&own, "o-1").await.as_deref(), Some("new"));
}

#[tokio::test]
async fn an_op_id_replays_and_is_not_reused_for_a_write() {
    let Some(dynamodb) = shared("tx_op_id").await else {
        return;
    };
    let own = own_table(&dynamodb).await;
    let (fence, domain) = (dynamodb.fence(), d("op"));
    let request = TransactionRequest::new(domain.clone(), t(3))
        .with_op_id(fence_core::OperationId::new("pay o-1").unwrap());
    let first = fence
        .transact(&request, order_and_ledger(own.table(), "o-1", "paid", 3))
        .await
        .unwrap();
    assert!(!first.is_duplicate());
    // Another process retries after an answer it never got.
    let retry = another_client(&dynamodb).fence();
    let again = retry
        .transact(&request, order_and_ledger(own.table(), "o-1", "paid", 3))
        .await
        .unwrap();
    assert_eq!(
        again,
        Transacted::Duplicate {
            previous_high_water_mark: None
        }
    );
    assert_eq!(history(&own).await, [3], "the replay wrote nothing");
    let ops = fence.remembered_ops(&domain).await.unwrap();
    assert_eq!(ops.len(), 1, "{ops:?}");
    let write = fence_core::WriteRequest::put(domain.clone(), t(3), "v")
        .with_op_id(fence_core::OperationId::new("pay o-1").unwrap());
    match fence_core::FencedStore::write(&*fence, &write).await {
        Err(FenceError::InvalidInput(InvalidInput::OpIdReused { .. })) => {}
        other => panic!("a transaction's op id reused for a write: {other:?}"),
    }
}

#[tokio::test]
async fn bad_actions_are_refused_before_any_io() {
    let Some(dynamodb) = shared("tx_bad").await else {
        return;
    };
    // Nothing listens behind this client: a refusal here never reached a server.
    let offline = fence_testkit::dynamodb::unreachable(&dynamodb).fence();
    let domain = d("bad");
    let request = TransactionRequest::new(domain.clone(), t(1));
    let many: Vec<_> = (0..=MAX_TRANSACTION_ACTIONS)
        .flat_map(|i| {
            order_and_ledger("own", &format!("o-{i}"), "x", 1)
                .into_iter()
                .take(1)
        })
        .collect();
    assert!(matches!(
        offline.transact(&request, many).await,
        Err(FenceError::InvalidInput(InvalidInput::Configuration(_)))
    ));
    // Any item of Fence's table — the domain's own, another domain's, a key Fence never
    // wrote — named by the table's name or its ARN: Fence's items change only through Fence.
    let arn = format!(
        "arn:aws:dynamodb:us-east-1:123456789012:table/{}",
        dynamodb.table()
    );
    for (table, key) in [
        (dynamodb.table().to_owned(), dynamodb.item_key(&domain)),
        (dynamodb.table().to_owned(), dynamodb.item_key(&d("other"))),
        (dynamodb.table().to_owned(), "not-fence".to_owned()),
        (arn.clone(), dynamodb.item_key(&domain)),
    ] {
        let action = TransactWriteItem::builder()
            .put(
                Put::builder()
                    .table_name(table.as_str())
                    .item("pk", s(&key))
                    .item("mark", AttributeValue::N("99".into()))
                    .build()
                    .unwrap(),
            )
            .build();
        assert!(
            matches!(
                offline.transact(&request, vec![action]).await,
                Err(FenceError::InvalidInput(InvalidInput::ReservedName { .. }))
            ),
            "{table} {key}"
        );
    }
    // A table whose name only ends like Fence's is the caller's own.
    let elsewhere = TransactWriteItem::builder()
        .put(
            Put::builder()
                .table_name(format!("x{}", dynamodb.table()))
                .item("pk", s("k"))
                .build()
                .unwrap(),
        )
        .build();
    assert!(!matches!(
        offline.transact(&request, vec![elsewhere]).await,
        Err(FenceError::InvalidInput(_))
    ));
}

/// Eight writers, each its own client, take tokens from the issuer and commit transactions
/// that append their token to one ledger item: every committed transaction appears once, and
/// the ledger's history never goes down (no token below one already accepted ever lands).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_with_mixed_tokens_leave_a_history_the_rule_allows() {
    let Some(dynamodb) = shared("tx_race").await else {
        return;
    };
    let own = Arc::new(own_table(&dynamodb).await);
    let issuer = Arc::new(dynamodb.issuer());
    let domain = d("race");
    let (writers, rounds) = (8, 30);
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..writers {
        let fence: Arc<fence_core::Observed<DynamoDbFence>> =
            Arc::new(another_client(&dynamodb).fence());
        let (own, issuer, domain) = (own.clone(), issuer.clone(), domain.clone());
        tasks.spawn(async move {
            let (mut committed, mut fenced) = (Vec::new(), 0);
            let mut held = issuer.issue(&domain).await.unwrap();
            for round in 0..rounds {
                // Every third round a writer takes a new token; otherwise it writes with the one
                // it holds, which others may have passed meanwhile.
                if round % 3 == 0 {
                    held = issuer.issue(&domain).await.unwrap();
                }
                let request = TransactionRequest::new(domain.clone(), held);
                match fence
                    .transact(
                        &request,
                        order_and_ledger(own.table(), &format!("o-{w}"), "x", held.get()),
                    )
                    .await
                {
                    Ok(_) => committed.push(held.get()),
                    Err(FenceError::Fenced {
                        presented, current, ..
                    }) => {
                        assert!(presented < current, "refused {presented} at mark {current}");
                        fenced += 1;
                    }
                    Err(error) if error.is_retryable() => {}
                    Err(other) => panic!("writer {w}: {other}"),
                }
            }
            (committed, fenced)
        });
    }
    let (mut committed, mut fenced) = (Vec::new(), 0);
    while let Some(done) = tasks.join_next().await {
        let (c, f) = done.unwrap();
        committed.extend(c);
        fenced += f;
    }
    let history = history(&own).await;
    assert!(
        history.windows(2).all(|w| w[0] <= w[1]),
        "a token below an accepted one landed: {history:?}"
    );
    let (mut sorted_history, mut sorted_committed) = (history.clone(), committed.clone());
    sorted_history.sort_unstable();
    sorted_committed.sort_unstable();
    assert_eq!(
        sorted_history, sorted_committed,
        "the ledger holds exactly the committed transactions"
    );
    assert!(
        fenced > 0,
        "the race never presented a stale token: it tested nothing"
    );
    let mark = dynamodb.fence().high_water_mark(&domain).await.unwrap();
    assert_eq!(mark.map(FencingToken::get), history.last().copied());
    println!("{} committed, {fenced} fenced", committed.len());
}
