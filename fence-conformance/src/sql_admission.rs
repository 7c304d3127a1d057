//! The bounds policies on a SQL adapter (fence-postgres, fence-mysql), run against its real
//! server by [`sql_admission_tests!`](crate::sql_admission_tests): every scenario of
//! [`crate::admission`] on writes and claims, plus what only a database with fenced
//! transactions and settings of its own has — fenced transactions admitted like writes, the
//! database's settings binding a client built without them, and storing them waiting for the
//! transactions in flight. Each function panics (failing the calling test) on a breach.

// A broken set-up or a breached contract fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_core::{
    AdmittedTransaction, BoundsConfig, Domain, Fence, FenceError, FencedStore, FencingToken,
    Rebaser, TokenIssuer,
};

use crate::admission;
use crate::services::{assert_fenced, domain as d, token as t};

/// The step bound the scenarios set.
pub const STEP: u64 = 1000;

/// A fenced transaction the fence admitted, still open.
#[async_trait]
pub trait OpenTransaction: Send {
    /// Commits it.
    async fn commit(self: Box<Self>) -> Result<(), FenceError>;
}

#[async_trait]
impl<Tx: AdmittedTransaction + 'static> OpenTransaction for Tx {
    async fn commit(self: Box<Self>) -> Result<(), FenceError> {
        AdmittedTransaction::commit(*self).await
    }
}

/// A SQL adapter's client as the scenarios drive it: one database, clients with settings of
/// their own.
#[async_trait]
pub trait SqlAdmission: Send + Sync {
    /// A client of the same database with `bounds` of its own.
    fn client(&self, bounds: BoundsConfig) -> Arc<dyn SqlAdmission>;

    /// This client as a store.
    fn store(&self) -> Arc<dyn FencedStore>;

    /// This client's re-bases.
    fn rebaser(&self) -> Arc<dyn Rebaser>;

    /// The database's own issuer.
    fn issuer(&self) -> Arc<dyn TokenIssuer>;

    /// Begins a fenced transaction of `token` on `domain` (no op id); the open transaction
    /// once admitted.
    async fn begin(
        &self,
        domain: &Domain,
        token: FencingToken,
    ) -> Result<Box<dyn OpenTransaction>, FenceError>;

    /// Stores the database's own settings.
    async fn set_resource_bounds(&self, bounds: BoundsConfig) -> Result<(), FenceError>;

    /// The database's own settings.
    async fn resource_bounds(&self) -> Result<BoundsConfig, FenceError>;

    /// Deletes `domain`'s counter row, as a restore that kept the marks would lose it.
    async fn lose_counter(&self, domain: &Domain);
}

/// One `#[tokio::test]` per scenario, each on the client `$make(test name)` returns
/// (`None`: a loud skip outside the test command), built without settings of its own.
#[macro_export]
macro_rules! sql_admission_tests {
    ($make:path) => {
        $crate::sql_admission_tests!($make;
            runaway_tokens_are_refused,
            unissued_tokens_are_refused,
            issued_vectors_agree_with_the_rule,
            forged_tokens_never_land_under_concurrency,
            fenced_transactions_are_admitted_like_writes,
            database_settings_bind_a_client_built_without_them,
            storing_settings_waits_for_fenced_transactions_in_flight,
            a_forged_mark_is_recovered_by_a_reviewed_rebase,
            a_lost_counter_refuses_tokens_until_the_issuer_reconciles,
            a_rebase_without_the_counter_needs_a_declaration,
        );
    };
    ($make:path; $($scenario:ident),* $(,)?) => {$(
        #[$crate::__private::tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $scenario() {
            if let Some(client) = $make(stringify!($scenario)).await {
                $crate::sql_admission::$scenario(&client).await;
            }
        }
    )*};
}

fn step() -> Option<NonZeroU64> {
    NonZeroU64::new(STEP)
}

/// [`admission::runaway_tokens_are_refused`] on a client with the step.
pub async fn runaway_tokens_are_refused(sql: &dyn SqlAdmission) {
    let client = sql.client(BoundsConfig::new(step(), false));
    admission::runaway_tokens_are_refused(client.store().as_ref(), &d("step"), STEP).await;
}

/// [`admission::unissued_tokens_are_refused`] on an issued-only client.
pub async fn unissued_tokens_are_refused(sql: &dyn SqlAdmission) {
    let client = sql.client(BoundsConfig::new(None, true));
    let issuer = client.issuer();
    admission::unissued_tokens_are_refused(client.store().as_ref(), issuer.as_ref(), &d("issued"))
        .await;
}

/// [`admission::issued_vectors_agree_with_the_rule`] on an issued-only client.
pub async fn issued_vectors_agree_with_the_rule(sql: &dyn SqlAdmission) {
    let client = sql.client(BoundsConfig::new(None, true));
    admission::issued_vectors_agree_with_the_rule(
        client.store(),
        client.issuer(),
        fence_core::IssuerView::IssuedUpTo,
        &crate::Namespace::new("issued_vectors"),
    )
    .await;
}

/// [`admission::forged_tokens_never_land_under_concurrency`] on an issued-only client.
pub async fn forged_tokens_never_land_under_concurrency(sql: &dyn SqlAdmission) {
    let client = sql.client(BoundsConfig::new(None, true));
    let issuer = client.issuer();
    admission::forged_tokens_never_land_under_concurrency(client.store(), issuer.as_ref(), &d("r"))
        .await;
}

/// A fenced transaction is admitted as a write is: an unissued token is `Unissued` and moves
/// nothing, the issued one commits, one too far above the mark is `TokenTooFar`, and a stale
/// one stays `Fenced` (the rule comes before the bounds).
pub async fn fenced_transactions_are_admitted_like_writes(sql: &dyn SqlAdmission) {
    let client = sql.client(BoundsConfig::new(step(), true));
    let domain = d("account");
    // Two tokens issued: the older one is stale once the newer one committed.
    let older = client.issuer().issue(&domain).await.unwrap();
    let issued = client.issuer().issue(&domain).await.unwrap();
    match client.begin(&domain, t(issued.get() + 1)).await {
        Err(FenceError::Unissued { presented, .. }) => {
            assert_eq!(presented.get(), issued.get() + 1)
        }
        other => panic!(
            "a transaction with an unissued token: {:?}",
            other.map(|_| ())
        ),
    }
    client
        .begin(&domain, issued)
        .await
        .expect("a transaction with the issued token")
        .commit()
        .await
        .unwrap();
    let mark = client.store().high_water_mark(&domain).await.unwrap();
    assert_eq!(mark, Some(issued), "the refused transaction moved the mark");
    let stepped = sql.client(BoundsConfig::new(step(), false));
    match stepped.begin(&domain, t(issued.get() + STEP + 1)).await {
        Err(FenceError::TokenTooFar { current, .. }) => assert_eq!(current, Some(issued)),
        other => panic!(
            "a transaction too far above the mark: {:?}",
            other.map(|_| ())
        ),
    }
    let fenced = stepped.begin(&domain, older).await.map(|_| ());
    assert_fenced(fenced, older.get(), issued.get());
}

/// The database's own settings bind a client built without any: the step bound and
/// issued-only are stored by one client and obeyed by another, unconfigured one, on writes,
/// claims and fenced transactions; removing them lets the same token through.
pub async fn database_settings_bind_a_client_built_without_them(operator: &dyn SqlAdmission) {
    let plain = operator.client(BoundsConfig::NONE);
    assert_eq!(plain.resource_bounds().await.unwrap(), BoundsConfig::NONE);

    let stepped = BoundsConfig::new(step(), false);
    operator.set_resource_bounds(stepped).await.unwrap();
    assert_eq!(plain.resource_bounds().await.unwrap(), stepped);
    let store = plain.store();
    admission::runaway_tokens_are_refused_by_the_resource(store.as_ref(), &d("step"), STEP).await;
    match plain.begin(&d("step-tx"), t(STEP + 1)).await {
        Err(FenceError::TokenTooFar { max_step, .. }) => assert_eq!(max_step.get(), STEP),
        other => panic!(
            "a fenced transaction too far above the mark: {:?}",
            other.map(|_| ())
        ),
    }

    operator
        .set_resource_bounds(BoundsConfig::new(None, true))
        .await
        .unwrap();
    let issuer = plain.issuer();
    admission::unissued_tokens_are_refused_by_the_resource(
        store.as_ref(),
        issuer.as_ref(),
        &d("issued"),
    )
    .await;
    let issued = issuer.issue(&d("account")).await.unwrap();
    let forged = t(issued.get() + 1);
    match plain.begin(&d("account"), forged).await {
        Err(FenceError::Unissued { .. }) => {}
        other => panic!(
            "a transaction with an unissued token: {:?}",
            other.map(|_| ())
        ),
    }

    // The same forged token passes once the setting is gone: the setting refused it.
    operator
        .set_resource_bounds(BoundsConfig::NONE)
        .await
        .unwrap();
    plain
        .begin(&d("account"), forged)
        .await
        .expect("a transaction without settings")
        .commit()
        .await
        .unwrap();
}

/// Storing settings waits for the fenced transactions in flight: once it returns, none decided
/// under the old settings can still raise a mark.
pub async fn storing_settings_waits_for_fenced_transactions_in_flight(operator: &dyn SqlAdmission) {
    let plain = operator.client(BoundsConfig::NONE);
    // Admitted with no setting in force: u64::MAX.
    let open = plain
        .begin(&d("barrier"), t(u64::MAX))
        .await
        .expect("admitted without settings");
    let storing = operator.set_resource_bounds(BoundsConfig::new(step(), false));
    tokio::pin!(storing);
    // Storing takes milliseconds; 1.5 s unfinished means it waits for the transaction.
    let waited = tokio::time::timeout(Duration::from_millis(1500), &mut storing).await;
    assert!(
        waited.is_err(),
        "the settings were stored while a transaction held a mark: {waited:?}"
    );
    // The store waits on the server; the transaction commits beside it, and the store
    // finishes promptly after.
    let (stored, committed) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(5), storing),
        open.commit()
    );
    committed.unwrap();
    stored
        .expect("stored within 5 s of the transaction's end")
        .expect("stored once the transaction ended");
    match plain.begin(&d("after"), t(u64::MAX)).await {
        Err(FenceError::TokenTooFar { .. }) => {}
        other => panic!("after the settings: {:?}", other.map(|_| ())),
    }
}

/// [`admission::forged_mark_is_recovered_by_a_reviewed_rebase`], the counter as the floor.
pub async fn a_forged_mark_is_recovered_by_a_reviewed_rebase(sql: &dyn SqlAdmission) {
    let (store, rebaser, issuer) = (sql.store(), sql.rebaser(), sql.issuer());
    admission::forged_mark_is_recovered_by_a_reviewed_rebase(
        store.as_ref(),
        rebaser.as_ref(),
        issuer.as_ref(),
        admission::RebaseFloor::LastIssued,
        &d("recovered"),
    )
    .await;
}

/// [`admission::lost_issuer_state_refuses_tokens_until_reconciled`]: a counter row lost,
/// every token refused until the issuer issues again, floored above the mark it sees.
pub async fn a_lost_counter_refuses_tokens_until_the_issuer_reconciles(sql: &dyn SqlAdmission) {
    let client = sql.client(BoundsConfig::new(None, true));
    let (store, issuer, domain) = (client.store(), client.issuer(), d("lost"));
    admission::lost_issuer_state_refuses_tokens_until_reconciled(
        store.as_ref(),
        issuer.as_ref(),
        &domain,
        client.lose_counter(&domain),
    )
    .await;
}

/// [`admission::rebase_without_issuer_state_needs_a_declaration`] after a counter row lost.
pub async fn a_rebase_without_the_counter_needs_a_declaration(sql: &dyn SqlAdmission) {
    let (store, rebaser, issuer, domain) = (sql.store(), sql.rebaser(), sql.issuer(), d("lost"));
    admission::rebase_without_issuer_state_needs_a_declaration(
        store.as_ref(),
        rebaser.as_ref(),
        issuer.as_ref(),
        &domain,
        sql.lose_counter(&domain),
    )
    .await;
}

/// Defines `SqlClient`, a test's [`SqlAdmission`] over a SQL adapter's observed fence of type
/// `$fence` (which has `to_builder()`, `max_token_step`, `issued_only`, `issuer()`, `begin`,
/// `set_resource_bounds` and `resource_bounds`, as fence-postgres's and fence-mysql's do);
/// `$lose(&fence, &domain)` deletes the domain's counter row.
#[macro_export]
macro_rules! sql_admission_client {
    ($fence:ty, $lose:path) => {
        /// The adapter's client as the SQL admission scenarios drive it.
        struct SqlClient($crate::__private::fence_core::Observed<$fence>);

        #[$crate::__private::async_trait]
        impl $crate::sql_admission::SqlAdmission for SqlClient {
            fn client(
                &self,
                bounds: $crate::__private::fence_core::BoundsConfig,
            ) -> std::sync::Arc<dyn $crate::sql_admission::SqlAdmission> {
                let mut builder = self.0.to_builder();
                if let Some(step) = bounds.max_step {
                    builder = builder.max_token_step(step);
                }
                if bounds.issued_only {
                    builder = builder.issued_only();
                }
                std::sync::Arc::new(SqlClient(builder.build().expect("a valid client")))
            }

            fn store(&self) -> std::sync::Arc<dyn $crate::__private::fence_core::FencedStore> {
                std::sync::Arc::new(self.0.clone())
            }

            fn rebaser(&self) -> std::sync::Arc<dyn $crate::__private::fence_core::Rebaser> {
                std::sync::Arc::new(self.0.clone())
            }

            fn issuer(&self) -> std::sync::Arc<dyn $crate::__private::fence_core::TokenIssuer> {
                std::sync::Arc::new(self.0.issuer())
            }

            async fn begin(
                &self,
                domain: &$crate::__private::fence_core::Domain,
                token: $crate::__private::fence_core::FencingToken,
            ) -> Result<
                Box<dyn $crate::sql_admission::OpenTransaction>,
                $crate::__private::fence_core::FenceError,
            > {
                let request =
                    $crate::__private::fence_core::TransactionRequest::new(domain.clone(), token);
                match self.0.begin(&request).await? {
                    $crate::__private::fence_core::Begun::Admitted(tx) => Ok(Box::new(tx)),
                    $crate::__private::fence_core::Begun::Duplicate { .. } => {
                        panic!("a duplicate without an op id")
                    }
                }
            }

            async fn set_resource_bounds(
                &self,
                bounds: $crate::__private::fence_core::BoundsConfig,
            ) -> Result<(), $crate::__private::fence_core::FenceError> {
                self.0.set_resource_bounds(bounds).await
            }

            async fn resource_bounds(
                &self,
            ) -> Result<
                $crate::__private::fence_core::BoundsConfig,
                $crate::__private::fence_core::FenceError,
            > {
                self.0.resource_bounds().await
            }

            async fn lose_counter(&self, domain: &$crate::__private::fence_core::Domain) {
                $lose(&self.0, domain).await;
            }
        }
    };
}
