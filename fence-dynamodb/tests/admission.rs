//! Admission on DynamoDB (moto in the test command): with `issued_only`, every write's condition
//! compares the token with the domain's counter, so only tokens the table issued land; the
//! bounded step.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::sync::Arc;

use fence_conformance::services::{domain as d, put, value_of};
use fence_conformance::{admission, Namespace};
use fence_core::{FenceError, IssuerView, TokenIssuer};
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_testkit::dynamodb::{another_client, shared};

#[tokio::test]
async fn runaway_tokens_are_refused() {
    let Some(dynamodb) = shared("adm_step").await else {
        return;
    };
    let step = 1_000_000;
    let fence = dynamodb
        .fence_builder()
        .max_token_step(NonZeroU64::new(step).unwrap())
        .build()
        .unwrap();
    admission::runaway_tokens_are_refused(&fence, &d("step"), step).await;
}

#[tokio::test]
async fn only_issued_tokens_write() {
    let Some(dynamodb) = shared("adm_issued").await else {
        return;
    };
    let fence = dynamodb.fence_builder().issued_only().build().unwrap();
    admission::unissued_tokens_are_refused(&fence, &dynamodb.issuer(), &d("issued")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issued_vectors_agree_with_the_rule() {
    let Some(dynamodb) = shared("adm_vectors").await else {
        return;
    };
    let fence = dynamodb.fence_builder().issued_only().build().unwrap();
    admission::issued_vectors_agree_with_the_rule(
        Arc::new(fence),
        Arc::new(dynamodb.issuer()),
        IssuerView::IssuedUpTo,
        &Namespace::new("issued_vectors"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_tokens_never_land_under_concurrency() {
    let Some(dynamodb) = shared("adm_forged").await else {
        return;
    };
    let fence = dynamodb.fence_builder().issued_only().build().unwrap();
    admission::forged_tokens_never_land_under_concurrency(
        Arc::new(fence),
        &dynamodb.issuer(),
        &d("r"),
    )
    .await;
}

/// A client decides on the counter it remembers, and DynamoDB's condition compares the real
/// one: after the counter was set back (a restore of an old backup), a token the cache still
/// counts as issued is refused by DynamoDB itself, and nothing is written.
#[tokio::test]
async fn the_counter_is_checked_by_dynamodb_not_by_a_cache() {
    let Some(dynamodb) = shared("adm_cached").await else {
        return;
    };
    let domain = d("cached");
    let issuer = dynamodb.issuer();
    for _ in 0..3 {
        issuer.issue(&domain).await.unwrap();
    }
    let fence = dynamodb.fence_builder().issued_only().build().unwrap();
    put(&fence, &domain, 1, "first").await.unwrap();
    dynamodb
        .client()
        .update_item()
        .table_name(dynamodb.table())
        .key("pk", AttributeValue::S(dynamodb.item_key(&domain)))
        .update_expression("SET ctr = :c")
        .expression_attribute_values(":c", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    match put(&fence, &domain, 3, "restored away").await {
        Err(FenceError::Unissued {
            presented,
            issuer: IssuerView::IssuedUpTo(Some(last)),
            ..
        }) => {
            assert_eq!((presented.get(), last.get()), (3, 1))
        }
        other => panic!("a token above the restored counter: {other:?}"),
    }
    assert_eq!(
        value_of(&*another_client(&dynamodb).fence(), &domain)
            .await
            .as_deref(),
        Some("first")
    );
}
