//! Issued-only acceptance, the bounded step and re-bases on MariaDB: the database's settings
//! and the domain's counter are read in the transaction that locks the mark row (claims,
//! writes and fenced transactions alike), and an operator's settings bind every client.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::num::NonZeroU64;
use std::sync::Arc;

use fence_conformance::services::{domain as d, token as t};
use fence_conformance::{admission, Namespace};
use fence_core::{BoundsConfig, FenceError, IssuerView, TokenIssuer};
use fence_mysql::{Begun, MySqlFence, TransactionRequest};
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
        Ok(Begun::Admitted(tx)) => tx.commit().await.unwrap(),
        other => panic!("a transaction with the issued token: {other:?}"),
    }
    let mark = fence_core::Fence::high_water_mark(&fence, &domain)
        .await
        .unwrap();
    assert_eq!(mark, Some(issued), "the refused transaction moved the mark");
    // The step, and a stale token that stays `Fenced` (the rule comes before the bounds).
    let plain = MySqlFence::builder(fence.pool().clone(), fence.database())
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

/// The database's own settings bind a client built without any: the step bound and
/// issued-only are stored by one client and obeyed by another, unconfigured one, on writes,
/// claims and fenced transactions; removing them lets the same token through.
#[tokio::test]
async fn database_settings_bind_a_client_built_without_them() {
    let Some((operator, pool)) = shared("adm_db").await else {
        return;
    };
    let plain = MySqlFence::builder(pool, operator.database())
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storing_settings_waits_for_fenced_transactions_in_flight() {
    let Some((operator, pool)) = shared("adm_barrier").await else {
        return;
    };
    let plain = MySqlFence::builder(pool, operator.database())
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

/// Settings the database cannot hold are refused by the table itself (a step of 0, a second
/// row), and a settings row deleted by hand fails closed instead of lifting the bounds.
#[tokio::test]
async fn settings_the_table_cannot_hold_are_refused_and_a_lost_row_fails_closed() {
    let Some((fence, pool)) = shared("adm_zero").await else {
        return;
    };
    let settings = format!("{}.fence_settings", fence.database());
    for statement in [
        format!("UPDATE {settings} SET max_step = 0"),
        format!("INSERT INTO {settings} (one, max_step, issued_only) VALUES (2, NULL, 0)"),
    ] {
        let refused = sqlx::query(&statement).execute(&pool).await;
        assert!(refused.is_err(), "stored: {statement}");
    }
    sqlx::query(&format!("DELETE FROM {settings}"))
        .execute(&pool)
        .await
        .unwrap();
    match fence_conformance::services::put(&fence, &d("x"), 1, "v").await {
        Err(FenceError::CorruptState { detail, .. }) => {
            assert!(detail.contains("fence_settings"), "{detail}")
        }
        other => panic!("a write without the settings row: {other:?}"),
    }
    fence_mysql::migrate(&pool, fence.database()).await.unwrap();
    fence_conformance::services::put(&fence, &d("x"), 1, "v")
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
    let lose = lose_counter(&pool, fence.database(), &domain);
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
    let lose = lose_counter(&pool, fence.database(), &domain);
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
async fn lose_counter(pool: &sqlx::MySqlPool, database: &str, domain: &fence_core::Domain) {
    let deleted = sqlx::query(&format!(
        "DELETE FROM {database}.fence_counters WHERE domain = ?"
    ))
    .bind(domain.as_str().as_bytes())
    .execute(pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(deleted, 1, "the counter row");
}
