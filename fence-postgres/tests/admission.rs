//! Issued-only acceptance and the bounded step on real PostgreSQL: the counter row is read and
//! the step checked in the write's own statement (`fence_write`) or transaction (claims,
//! fenced transactions).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::num::NonZeroU64;
use std::sync::Arc;

use fence_conformance::services::{domain as d, token as t};
use fence_conformance::{admission, Namespace};
use fence_core::{BackendErrorKind, BoundsConfig, FenceError, IssuerView, TokenIssuer};
use fence_postgres::{Begun, TransactionRequest};
use support::shared;

const STEP: u64 = 1000;

#[tokio::test]
async fn runaway_tokens_are_refused() {
    let Some((fence, _)) = shared("adm_step").await else {
        return;
    };
    let fence = fence
        .to_builder()
        .max_token_step(NonZeroU64::new(STEP).unwrap())
        .build()
        .unwrap();
    admission::runaway_tokens_are_refused(&fence, &d("step"), STEP).await;
}

#[tokio::test]
async fn unissued_tokens_are_refused() {
    let Some((fence, _)) = shared("adm_issued").await else {
        return;
    };
    let fence = fence.to_builder().issued_only().build().unwrap();
    admission::unissued_tokens_are_refused(&fence, &fence.issuer(), &d("issued")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issued_vectors_agree_with_the_rule() {
    let Some((fence, _)) = shared("adm_vectors").await else {
        return;
    };
    let fence = fence.to_builder().issued_only().build().unwrap();
    let issuer = Arc::new(fence.issuer());
    admission::issued_vectors_agree_with_the_rule(
        Arc::new(fence),
        issuer,
        IssuerView::IssuedUpTo,
        &Namespace::new("issued_vectors"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_tokens_never_land_under_concurrency() {
    let Some((fence, _)) = shared("adm_forged").await else {
        return;
    };
    let fence = fence.to_builder().issued_only().build().unwrap();
    let issuer = fence.issuer();
    admission::forged_tokens_never_land_under_concurrency(Arc::new(fence), &issuer, &d("r")).await;
}

#[tokio::test]
async fn fenced_transactions_are_admitted_like_writes() {
    let Some((fence, _)) = shared("adm_tx").await else {
        return;
    };
    let fence = fence
        .to_builder()
        .issued_only()
        .max_token_step(NonZeroU64::new(STEP).unwrap())
        .build()
        .unwrap();
    let domain = d("account");
    let issued = fence.issuer().issue(&domain).await.unwrap();
    let forged = TransactionRequest::new(domain.clone(), t(issued.get() + 1));
    match fence.begin(&forged).await {
        Err(FenceError::Unissued { presented, .. }) => {
            assert_eq!(presented.get(), issued.get() + 1)
        }
        other => panic!("a transaction with an unissued token: {other:?}"),
    }
    match fence
        .begin(&TransactionRequest::new(domain.clone(), issued))
        .await
    {
        Ok(Begun::Admitted(tx)) => {
            tx.commit().await.unwrap();
        }
        other => panic!("a transaction with the issued token: {other:?}"),
    }
    let mark = fence_core::Fence::high_water_mark(&fence, &domain)
        .await
        .unwrap();
    assert_eq!(mark, Some(issued), "the refused transaction moved the mark");
    // The step, and a stale token that stays `Fenced` (the rule comes before the bounds).
    let plain = fence_postgres::PostgresFence::builder(fence.pool().clone(), fence.schema())
        .max_token_step(NonZeroU64::new(STEP).unwrap())
        .build()
        .unwrap();
    let far = TransactionRequest::new(domain.clone(), t(issued.get() + STEP + 1));
    match plain.begin(&far).await {
        Err(FenceError::TokenTooFar { current, .. }) => assert_eq!(current, Some(issued)),
        other => panic!("a transaction too far above the mark: {other:?}"),
    }
    if issued.get() > 1 {
        let stale = TransactionRequest::new(domain.clone(), t(issued.get() - 1));
        let fenced = plain.begin(&stale).await.map(|_| ());
        fence_conformance::services::assert_fenced(fenced, issued.get() - 1, issued.get());
    }
}

/// The schema's own settings bind a client built without any: the step bound and issued-only
/// are stored by one client and obeyed by another, unconfigured one, on writes, claims and
/// fenced transactions; removing them lets the same token through.
#[tokio::test]
async fn schema_settings_bind_a_client_built_without_them() {
    let Some((operator, pool)) = shared("adm_schema").await else {
        return;
    };
    let plain = fence_postgres::PostgresFence::builder(pool, operator.schema())
        .build()
        .unwrap();
    let step = NonZeroU64::new(STEP);
    assert_eq!(plain.resource_bounds().await.unwrap(), BoundsConfig::NONE);

    operator
        .set_resource_bounds(BoundsConfig::new(step, false))
        .await
        .unwrap();
    assert_eq!(
        plain.resource_bounds().await.unwrap(),
        BoundsConfig::new(step, false)
    );
    admission::runaway_tokens_are_refused_by_the_resource(&plain, &d("step"), STEP).await;
    let far = TransactionRequest::new(d("step-tx"), t(STEP + 1));
    match plain.begin(&far).await {
        Err(FenceError::TokenTooFar { max_step, .. }) => assert_eq!(max_step.get(), STEP),
        other => panic!("a fenced transaction too far above the mark: {other:?}"),
    }

    operator
        .set_resource_bounds(BoundsConfig::new(None, true))
        .await
        .unwrap();
    admission::unissued_tokens_are_refused_by_the_resource(&plain, &plain.issuer(), &d("issued"))
        .await;
    let issued = plain.issuer().issue(&d("account")).await.unwrap();
    let forged = TransactionRequest::new(d("account"), t(issued.get() + 1));
    match plain.begin(&forged).await {
        Err(FenceError::Unissued { .. }) => {}
        other => panic!("a transaction with an unissued token: {other:?}"),
    }

    // The same forged token passes once the setting is gone: the setting refused it.
    operator
        .set_resource_bounds(BoundsConfig::NONE)
        .await
        .unwrap();
    match plain.begin(&forged).await {
        Ok(Begun::Admitted(tx)) => tx.commit().await.unwrap(),
        other => panic!("a transaction without settings: {other:?}"),
    }
}

/// Storing settings waits for the fenced transactions in flight: once it returns, none decided
/// under the old settings can still raise a mark.
#[tokio::test]
async fn storing_settings_waits_for_fenced_transactions_in_flight() {
    let Some((operator, pool)) = shared("adm_barrier").await else {
        return;
    };
    let plain = fence_postgres::PostgresFence::builder(pool, operator.schema())
        .build()
        .unwrap();
    // Admitted with no setting in force: u64::MAX.
    let Ok(Begun::Admitted(tx)) = plain
        .begin(&TransactionRequest::new(d("barrier"), t(u64::MAX)))
        .await
    else {
        panic!("admitted without settings");
    };
    let storing = tokio::spawn(async move {
        operator
            .set_resource_bounds(BoundsConfig::new(NonZeroU64::new(STEP), false))
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        !storing.is_finished(),
        "the settings were stored while a transaction held a mark"
    );
    tx.commit().await.unwrap();
    storing
        .await
        .unwrap()
        .expect("stored once the transaction ended");
    // From then on a fresh domain's runaway token is refused.
    match plain
        .begin(&TransactionRequest::new(d("after"), t(u64::MAX)))
        .await
    {
        Err(FenceError::TokenTooFar { .. }) => {}
        other => panic!("after the settings: {other:?}"),
    }
}

/// Settings the schema cannot hold are refused by the table itself (a step of 0).
#[tokio::test]
async fn a_step_of_zero_cannot_be_stored() {
    let Some((fence, pool)) = shared("adm_zero").await else {
        return;
    };
    let refused = sqlx::query(&format!(
        "INSERT INTO {}.fence_settings (max_step) VALUES (0)",
        fence.schema()
    ))
    .execute(&pool)
    .await;
    assert!(refused.is_err(), "a step of zero was stored");
}

#[tokio::test]
async fn a_schema_from_before_the_admission_checks_must_be_migrated_again() {
    // Version 1's function took nine arguments.
    must_be_migrated_again(
        "adm_upgrade",
        "CREATE FUNCTION fence_schema.fence_write(text, numeric, boolean, text, text, bigint, \
         \"char\", bytea, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
    )
    .await;
}

#[tokio::test]
async fn a_schema_from_before_the_schema_settings_must_be_migrated_again() {
    // Version 2's, as it was: eleven arguments, no bounds returned, fence_settings never read.
    must_be_migrated_again("adm_upgrade2", include_str!("fixtures/fence_write_v2.sql")).await;
}

/// Replaces the schema's `fence_write` with an older one (`old_function`, with `fence_schema`
/// for the schema): a write is refused as not migrated, and `migrate` repairs the schema.
async fn must_be_migrated_again(name: &str, old_function: &str) {
    let Some((fence, pool)) = shared(name).await else {
        return;
    };
    let schema = fence.schema().to_owned();
    sqlx::raw_sql(&format!(
        "DROP FUNCTION {schema}.fence_write(text, numeric, boolean, text, text, bigint, \"char\", \
         bytea, bigint, numeric, boolean); {}",
        old_function.replace("fence_schema", &schema)
    ))
    .execute(&pool)
    .await
    .unwrap();
    let stale = fence_postgres::PostgresFence::builder(pool.clone(), &schema)
        .build()
        .unwrap();
    let refused = fence_conformance::services::put(&stale, &d("x"), 1, "v").await;
    match &refused {
        Err(error) => {
            assert_eq!(
                error.backend_kind(),
                Some(BackendErrorKind::NotFound),
                "{error}"
            );
            assert!(error.to_string().contains("fence_write"), "{error}");
        }
        Ok(outcome) => panic!("a write on the old schema: {outcome:?}"),
    }
    fence_postgres::migrate(&pool, &schema).await.unwrap();
    let fresh = fence_postgres::PostgresFence::builder(pool, &schema)
        .build()
        .unwrap();
    fence_conformance::services::put(&fresh, &d("x"), 1, "v")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_forged_mark_is_recovered_by_a_reviewed_rebase() {
    let Some((fence, _)) = shared("adm_rebase").await else {
        return;
    };
    let issuer = fence.issuer();
    admission::forged_mark_is_recovered_by_a_reviewed_rebase(
        &fence,
        &fence,
        &issuer,
        admission::RebaseFloor::LastIssued,
        &d("recovered"),
    )
    .await;
}

/// A counter row lost (deleted by hand, or a restore that kept the marks): every token is
/// refused until the issuer issues again, floored above the mark it sees.
#[tokio::test]
async fn a_lost_counter_refuses_tokens_until_the_issuer_reconciles() {
    let Some((fence, pool)) = shared("adm_lost").await else {
        return;
    };
    let fence = fence.to_builder().issued_only().build().unwrap();
    let domain = d("lost");
    let lose = lose_counter(&pool, fence.schema(), &domain);
    admission::lost_issuer_state_refuses_tokens_until_reconciled(
        &fence,
        &fence.issuer(),
        &domain,
        lose,
    )
    .await;
}

#[tokio::test]
async fn a_rebase_without_the_counter_needs_a_declaration() {
    let Some((fence, pool)) = shared("adm_rebase_lost").await else {
        return;
    };
    let domain = d("lost");
    let lose = lose_counter(&pool, fence.schema(), &domain);
    admission::rebase_without_issuer_state_needs_a_declaration(
        &fence,
        &fence,
        &fence.issuer(),
        &domain,
        lose,
    )
    .await;
}

/// Deletes the domain's counter row, as a restore that kept the marks would lose it.
async fn lose_counter(pool: &sqlx::PgPool, schema: &str, domain: &fence_core::Domain) {
    let deleted = sqlx::query(&format!(
        "DELETE FROM {schema}.fence_counters WHERE domain = $1"
    ))
    .bind(domain.as_str())
    .execute(pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(deleted, 1, "the counter row");
}
