//! What the SQL adapters' tests share, once, generic over fence-sql's dialect: the shared
//! server's fences, the store harness on a server the test owns, the fenced-transaction
//! harness counting runs in a user table, and the lease tests ([`sql_lease_tests!`]).
// A broken set-up fails the calling test: panicking is the job here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fence_conformance::entry::{Call, EntryHarness, Ran};
use fence_conformance::services::domain as d;
use fence_conformance::{lease, StatePart, StoreHarness};
use fence_core::permissions::Access;
use fence_core::{
    BoxError, Capabilities, Domain, Fence, FenceError, FencedStore, FencingToken, LeaseManager,
    Observed, OpIdRetention, OwnerId, TokenIssuer, TransactionError, TransactionRequest,
    DEFAULT_OP_ID_RETENTION,
};
use fence_sql::{ConnectionOf, Dialect, FenceBuilder, FenceCore, Transactional};
use sqlx::pool::PoolOptions;
use sqlx::Type;
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, QueryBuilder, Row,
};

/// What the tests need of a database beyond its adapter: its servers, pools, migration, and
/// the few statements the tests send around the fence.
#[async_trait]
pub trait SqlTestbed: Dialect {
    /// A server the test owns (its own port and data), stopped when dropped.
    type Server: Send + Sync + 'static;

    /// Starts a server named after `test` (`None`: a loud skip outside the test command).
    fn start(test: &str) -> Option<Self::Server>;
    /// The URL of a server the test owns.
    fn url(server: &Self::Server) -> String;
    /// Kills a server the test owns with SIGKILL and starts it again on its data.
    fn kill_and_restart(server: &Self::Server);
    /// The shared server's URL (`None`: a loud skip outside the test command).
    fn shared_url() -> Option<String>;
    /// A fresh namespace (schema or database) name for `test`.
    fn unique_namespace(test: &str) -> String;
    /// A pool of connections to `url`.
    async fn pool(url: &str) -> Pool<Self::Db>;
    /// The adapter's migration of `namespace`.
    async fn migrate(pool: &Pool<Self::Db>, namespace: &str) -> Result<(), FenceError>;

    /// A URL of this database's kind naming a server that cannot be reached.
    const UNREACHABLE_URL: &'static str;
    /// The mark row's assignment that leaves it without a token of Fence's (the columns'
    /// constraints allow it).
    const NO_MARK: &'static str;
    /// The counter table of `table`: runs counted per domain (`domain`, `n BIGINT`).
    fn counter_table(table: &str) -> String;
    /// What follows `INSERT INTO table (domain, n) VALUES (…, 1)` to add one to an existing row.
    fn count_up(table: &str) -> String;
}

/// The namespace of a server the test owns.
const NAMESPACE: &str = "fence";
/// The value limit of the fences the harnesses build.
const MAX_VALUE_BYTES: usize = 64 * 1024;

/// A fence in a freshly migrated namespace named after `test` on the shared server, and its
/// pool (`None`: a loud skip outside the test command).
pub async fn shared<D: SqlTestbed>(test: &str) -> Option<(Observed<D::Fence>, Pool<D::Db>)> {
    let url = D::shared_url()?;
    let pool = D::pool(&url).await;
    let namespace = D::unique_namespace(test);
    D::migrate(&pool, &namespace).await.expect("migrate");
    let fence = FenceBuilder::<D>::new(pool.clone(), &namespace)
        .build()
        .expect("a valid namespace");
    Some((fence, pool))
}

/// A fence on `url` (migrated first) with the harnesses' value limit.
async fn owned_fence<D: SqlTestbed>(url: &str) -> Observed<D::Fence> {
    let pool = D::pool(url).await;
    D::migrate(&pool, NAMESPACE).await.expect("migrate");
    FenceBuilder::<D>::new(pool, NAMESPACE)
        .max_value_bytes(MAX_VALUE_BYTES)
        .build()
        .expect("a valid namespace")
}

/// A fence whose pool names a server that cannot be reached (connections are tried lazily).
fn unreachable_fence<D: SqlTestbed>(acquire_timeout: Duration) -> Observed<D::Fence> {
    let pool = PoolOptions::<D::Db>::new()
        .acquire_timeout(acquire_timeout)
        .connect_lazy(D::UNREACHABLE_URL)
        .expect("a valid URL");
    FenceBuilder::<D>::new(pool, NAMESPACE)
        .max_value_bytes(MAX_VALUE_BYTES)
        .build()
        .expect("a valid namespace")
}

/// The store conformance harness on a server the test owns, so the restart scenario can
/// kill -9 it: `fence_conformance::store_conformance!(fence_testkit::sql::dedicated::<D>)`.
pub struct Dedicated<D: SqlTestbed> {
    server: D::Server,
    fence: Mutex<Observed<D::Fence>>,
}

/// Starts the server of a [`Dedicated`] harness.
pub async fn dedicated<D: SqlTestbed>() -> Option<Dedicated<D>> {
    let server = D::start("conformance")?;
    let fence = Mutex::new(owned_fence::<D>(&D::url(&server)).await);
    Some(Dedicated { server, fence })
}

#[async_trait]
impl<D: SqlTestbed> StoreHarness for Dedicated<D>
where
    D::Fence: FencedStore + Clone + std::ops::Deref<Target = FenceCore<D>> + 'static,
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
{
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.fence.lock().expect("lock").clone())
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        D::kill_and_restart(&self.server);
        let fresh = owned_fence::<D>(&D::url(&self.server)).await;
        *self.fence.lock().expect("lock") = fresh;
        Ok(true)
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(unreachable_fence::<D>(Duration::from_secs(2))))
    }

    /// Updates the domain's mark row, going around Fence: the mark to no token of Fence's, or
    /// the entry's kind to one Fence never writes.
    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let set = match part {
            StatePart::Mark => D::NO_MARK,
            StatePart::Entry => "state = 'x'",
            _ => return Ok(false),
        };
        let pool = self.fence.lock().expect("lock").pool().clone();
        let mut update = QueryBuilder::new(format!(
            "UPDATE {NAMESPACE}.fence_marks SET {set} WHERE domain = "
        ));
        D::push_domain(&mut update, domain);
        let mut conn = pool.acquire().await?;
        let updated = update.build().execute(&mut *conn).await?;
        if D::rows_affected(&updated) != 1 {
            return Err(format!("no mark row for `{domain}`").into());
        }
        Ok(true)
    }
}

/// The capabilities a fence of `D` declares, pinned: a change changes which conformance
/// scenarios run.
pub fn declared_capabilities_are_pinned<D: SqlTestbed>()
where
    D::Fence: Fence,
{
    let caps = unreachable_fence::<D>(Duration::from_secs(1)).capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(DEFAULT_OP_ID_RETENTION))
            .with_max_value_bytes(Some(MAX_VALUE_BYTES))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    assert!(caps.write && caps.delete && caps.read && caps.claim && !caps.append);
    assert!(caps.revision_cas && caps.strict_policy && caps.op_id_replay());
}

/// The fenced-transaction conformance harness, an entry point that is not a trait method:
/// each run adds one to a counter row of a user table in the fenced transaction, so the
/// counter, read at the server, counts the runs that committed:
/// `fence_conformance::entry_conformance!(fence_testkit::sql::counted_transactions::<D>)`.
pub struct CountedTransactions<D: SqlTestbed> {
    fence: Observed<D::Fence>,
    pool: Pool<D::Db>,
    counters: String,
}

/// A [`CountedTransactions`] harness on the shared server (its counter table created).
pub async fn counted_transactions<D: SqlTestbed>() -> Option<&'static CountedTransactions<D>>
where
    D::Fence: std::ops::Deref<Target = FenceCore<D>>,
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
{
    let (fence, pool) = shared::<D>("txn_entry").await?;
    let counters = format!("{}.counters", fence.tables().name());
    let mut conn = pool.acquire().await.unwrap();
    QueryBuilder::<D::Db>::new(D::counter_table(&counters))
        .build()
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    Some(Box::leak(Box::new(CountedTransactions {
        fence,
        pool,
        counters,
    })))
}

#[async_trait]
impl<D: SqlTestbed> EntryHarness for CountedTransactions<D>
where
    D::Fence: Fence + Transactional<Dialect = D> + Clone + 'static,
    ConnectionOf<D>: Send,
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    String: for<'q> Encode<'q, D::Db> + Type<D::Db>,
    i64: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    async fn run(&self, call: &Call) -> Result<Ran, FenceError> {
        let mut request =
            TransactionRequest::new(call.domain.clone(), call.token).with_policy(call.policy);
        if let Some(op_id) = &call.op_id {
            request = request.with_op_id(op_id.clone());
        }
        let (counters, domain) = (self.counters.clone(), call.domain.as_str().to_owned());
        let fence: &D::Fence = &self.fence;
        let outcome = fence_sql::transaction(fence, &request, |conn| {
            Box::pin(async move {
                let mut count = QueryBuilder::<D::Db>::new(format!(
                    "INSERT INTO {counters} (domain, n) VALUES ("
                ));
                count
                    .push_bind(domain)
                    .push(", 1)")
                    .push(D::count_up(&counters));
                count.build().execute(conn).await.map(drop)
            })
        })
        .await;
        match outcome {
            Ok(done) => Ok(Ran {
                duplicate: done.is_duplicate(),
                previous: done.previous_high_water_mark(),
            }),
            Err(TransactionError::Fence(e)) => Err(e),
            Err(other) => panic!("the counter update failed: {other}"),
        }
    }

    async fn applied(&self, domain: &Domain) -> Result<u64, FenceError> {
        let mut read =
            QueryBuilder::<D::Db>::new(format!("SELECT n FROM {} WHERE domain = ", self.counters));
        read.push_bind(domain.as_str().to_owned());
        let mut conn = self.pool.acquire().await.unwrap();
        let row = read
            .build()
            .fetch_optional(&mut *conn)
            .await
            .expect("read the counter");
        let n: i64 = row.map_or(0, |row| row.try_get(0).expect("a count"));
        Ok(u64::try_from(n).expect("a count is not negative"))
    }

    fn fence(&self) -> Arc<dyn Fence> {
        Arc::new(self.fence.clone())
    }
}

/// Counts the rows `domain` keeps in each of the fence's tables (all 0 once retired).
pub async fn rows_of<D: SqlTestbed>(
    fence: &FenceCore<D>,
    domain: &Domain,
) -> Vec<(&'static str, i64)>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    i64: for<'r> Decode<'r, D::Db> + Type<D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    let mut counted = Vec::new();
    for table in ["fence_marks", "fence_counters", "fence_ops", "fence_leases"] {
        let mut count = QueryBuilder::<D::Db>::new(format!(
            "SELECT COUNT(*) FROM {} WHERE domain = ",
            fence.tables().table(table)
        ));
        D::push_domain(&mut count, domain);
        let mut conn = fence.pool().acquire().await.unwrap();
        let row = count.build().fetch_one(&mut *conn).await.unwrap();
        counted.push((table, row.try_get(0).unwrap()));
    }
    counted
}

/// Sets the counter row of `domain` (to `last`, or deletes it: `None`), going around the
/// issuer, as a restore from an older backup would.
pub async fn set_counter<D: SqlTestbed>(fence: &FenceCore<D>, domain: &Domain, last: Option<u64>)
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
{
    let counters = fence.tables().counters();
    let mut change = match last {
        None => QueryBuilder::<D::Db>::new(format!("DELETE FROM {counters}")),
        Some(last) => {
            let mut update = QueryBuilder::new(format!("UPDATE {counters} SET last = "));
            match FencingToken::new(last) {
                Ok(token) => D::push_token(&mut update, token),
                Err(_) => {
                    update.push("0");
                }
            }
            update
        }
    };
    change.push(" WHERE domain = ");
    D::push_domain(&mut change, domain);
    let mut conn = fence.pool().acquire().await.unwrap();
    let changed = change.build().execute(&mut *conn).await.unwrap();
    assert_eq!(D::rows_affected(&changed), 1, "the counter row of {domain}");
}

/// The issuer of `D` stays monotonic across a kill -9 of its server, and a lease granted
/// before the crash is still held after it.
pub async fn the_issuer_is_monotonic_across_a_crash<D: SqlTestbed>()
where
    D::Fence: std::ops::Deref<Target = FenceCore<D>>,
    fence_sql::SqlIssuer<D>: TokenIssuer,
    fence_sql::SqlLeases<D>: LeaseManager,
{
    let Some(server) = D::start("issuer_crash") else {
        return;
    };
    let fence = owned_fence::<D>(&D::url(&server)).await;
    let domain = d("durable");
    let mut last = FencingToken::MIN;
    for _ in 0..5 {
        last = fence.issuer().issue(&domain).await.unwrap();
    }
    let owner = OwnerId::new("a").unwrap();
    let lease = fence
        .leases()
        .acquire(&domain, &owner, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(lease.token > last);
    D::kill_and_restart(&server);
    let fence = owned_fence::<D>(&D::url(&server)).await;
    let next = fence.issuer().issue(&domain).await.unwrap();
    assert!(
        next > lease.token,
        "after a crash the issuer went on from {}: issued {next}",
        lease.token
    );
    let held = fence.leases().holder(&domain).await.unwrap();
    assert_eq!(
        held.map(|h| h.token),
        Some(lease.token),
        "the lease survived the crash"
    );
    // So another owner is refused until it expires.
    let other = fence
        .leases()
        .acquire(&domain, &OwnerId::new("b").unwrap(), Duration::from_secs(5))
        .await;
    assert!(
        matches!(other, Err(FenceError::LeaseHeld { .. })),
        "{other:?}"
    );
}

/// The counter row of `domain` as stored (`None`: no row), read around the issuer.
pub async fn counter_of<D: SqlTestbed>(fence: &FenceCore<D>, domain: &Domain) -> Option<u64>
where
    for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
    for<'a, 'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
    usize: ColumnIndex<<D::Db as Database>::Row>,
{
    let mut read = QueryBuilder::<D::Db>::new(format!(
        "SELECT {} FROM {} WHERE domain = ",
        D::token_select("last"),
        fence.tables().counters()
    ));
    D::push_domain(&mut read, domain);
    let mut conn = fence.pool().acquire().await.unwrap();
    let row = read.build().fetch_optional(&mut *conn).await.unwrap()?;
    let last: D::TokenValue = row.try_get(0).unwrap();
    Some(D::number_of(domain, last, "token counter").unwrap())
}

/// The lease tests every SQL adapter runs, on its dialect `$dialect` (a [`SqlTestbed`]): the
/// shared lease contract (an expired holder fenced by the next owner, the drift bound, the
/// holder reported, TTLs out of range refused, one winner among concurrent acquisitions, the
/// guard), the counter floored at the mark and exhausting cleanly, the issuer monotonic
/// across a kill -9, and a retired domain leaving no rows.
#[macro_export]
macro_rules! sql_lease_tests {
    ($dialect:ty) => {
        #[tokio::test]
        async fn an_expired_holder_is_fenced_by_the_next_owner() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("lease_story").await else {
                return;
            };
            let (leases, issuer) = (fence.leases(), fence.issuer());
            $crate::__private::lease::expired_holder_is_fenced_by_the_next_owner(
                &fence,
                &leases,
                Some(&issuer),
                &$crate::__private::domain("shard-7"),
            )
            .await;
        }

        #[tokio::test]
        async fn the_holder_gives_up_first_under_the_drift_bound() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("lease_drift").await else {
                return;
            };
            // The remaining time is reported in whole milliseconds.
            $crate::__private::lease::the_holder_gives_up_first_under_the_drift_bound(
                &fence.leases(),
                &$crate::__private::domain("drift"),
                ::std::time::Duration::from_millis(1),
            )
            .await;
        }

        #[tokio::test]
        async fn the_holder_is_reported() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("lease_holder").await else {
                return;
            };
            $crate::__private::lease::holder_is_reported(
                &fence.leases(),
                &$crate::__private::domain("held"),
            )
            .await;
        }

        #[tokio::test]
        async fn ttls_out_of_range_are_refused() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("lease_ttl").await else {
                return;
            };
            $crate::sql::ttls_out_of_range_are_refused::<$dialect>(&fence.leases()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn concurrent_acquires_have_exactly_one_winner() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("lease_race").await else {
                return;
            };
            $crate::__private::lease::concurrent_acquires_have_exactly_one_winner(
                ::std::sync::Arc::new(fence.leases()),
                &$crate::__private::domain("contended"),
                $crate::__private::lease::TokenSequence::Consecutive,
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn the_guard_renews_waits_and_signals_loss() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("lease_guard").await else {
                return;
            };
            $crate::__private::lease::guard_renews_waits_and_signals_loss(
                ::std::sync::Arc::new(fence.leases()),
                &$crate::__private::domain("guarded"),
            )
            .await;
        }

        #[tokio::test]
        async fn the_counter_is_floored_at_the_mark_and_exhausts_cleanly() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("issuer").await else {
                return;
            };
            let (issuer, leases) = (fence.issuer(), fence.leases());
            $crate::__private::lease::issuer_is_strictly_increasing(
                &issuer,
                &$crate::__private::domain("issued"),
            )
            .await;
            let recreated = $crate::__private::domain("recreated");
            let set_counter = |last: Option<u64>| -> $crate::__private::BoxFuture<'static, ()> {
                let (fence, recreated) = (fence.clone(), recreated.clone());
                Box::pin(async move {
                    $crate::sql::set_counter::<$dialect>(&fence, &recreated, last).await;
                })
            };
            $crate::__private::lease::issuer_is_floored_at_the_mark_and_exhausts_cleanly(
                &fence,
                &issuer,
                &leases,
                &recreated,
                &set_counter,
            )
            .await;
            assert_eq!(
                $crate::sql::counter_of::<$dialect>(&fence, &recreated).await,
                Some(u64::MAX),
                "an exhausted counter is left as it was"
            );
        }

        #[tokio::test]
        async fn the_issuer_is_monotonic_across_a_crash_of_the_server() {
            $crate::sql::the_issuer_is_monotonic_across_a_crash::<$dialect>().await;
        }

        #[tokio::test]
        async fn a_retired_domain_leaves_no_rows() {
            let Some((fence, _)) = $crate::sql::shared::<$dialect>("retire").await else {
                return;
            };
            let domain = $crate::__private::domain("retired");
            $crate::__private::retirement::retirement_removes_the_domain_and_nothing_else(
                &fence,
                &fence,
                Some(&fence.leases()),
                &domain,
            )
            .await;
            for (table, rows) in $crate::sql::rows_of::<$dialect>(&fence, &domain).await {
                assert_eq!(rows, 0, "{table} kept rows of the retired domain");
            }
        }
    };
}

/// TTLs out of range are refused before any I/O: fence-core's bounds, and past what the
/// dialect's lease rows hold.
pub async fn ttls_out_of_range_are_refused<D: SqlTestbed>(leases: &dyn LeaseManager) {
    let domain = d("ttl");
    lease::ttls_out_of_range_are_refused(leases, &domain).await;
    let too_long = leases
        .acquire(
            &domain,
            &OwnerId::new("x").unwrap(),
            D::MAX_LEASE_TTL.saturating_add(Duration::from_secs(1)),
        )
        .await;
    assert!(
        matches!(too_long, Err(FenceError::InvalidInput(_))),
        "{too_long:?}"
    );
}

/// The permission check of a fence of `D`: the test user, owner of a freshly migrated
/// namespace on the shared server, is granted every privilege. Returns that fence and the test
/// user's pool, for the adapter's own checks of a user granted less (`None`: a loud skip
/// outside the test command).
pub async fn the_owner_is_granted_everything<D: SqlTestbed>(
) -> Option<(Observed<D::Fence>, Pool<D::Db>)> {
    let (fence, admin) = shared::<D>("permissions").await?;
    let report = D::check_permissions(&fence).await.unwrap();
    println!("{report}");
    assert!(report.all_granted(), "{report}");
    Some((fence, admin))
}

/// The permission check of a fence of `D` on a namespace never migrated: nothing granted,
/// nothing denied, every privilege unknown (the tables it names do not exist).
pub async fn unmigrated_privileges_are_unknown<D: SqlTestbed>() {
    let Some(url) = D::shared_url() else {
        return;
    };
    let fence = FenceBuilder::<D>::new(D::pool(&url).await, &D::unique_namespace("unmigrated"))
        .build()
        .unwrap();
    let report = D::check_permissions(&fence).await.unwrap();
    println!("{report}");
    assert!(!report.all_granted());
    assert_eq!(report.denied().count(), 0, "{report}");
    assert!(report
        .permissions
        .iter()
        .all(|p| matches!(p.access, Access::Unknown(_))));
}

/// The SQL admission suite (fence-conformance's `sql_admission_tests!`) on the shared server,
/// for the fence `$fence` of dialect `$dialect`: a client per test, and a counter row lost by
/// deleting it around the issuer.
#[macro_export]
macro_rules! sql_admission_tests {
    ($fence:ty, $dialect:ty) => {
        /// Deletes the domain's counter row, as a restore that kept the marks would lose it.
        async fn lose_counter(
            fence: &$crate::__private::Observed<$fence>,
            domain: &$crate::__private::Domain,
        ) {
            $crate::sql::set_counter::<$dialect>(fence, domain, None).await;
        }

        $crate::__private::fence_conformance::sql_admission_client!($fence, lose_counter);
        $crate::__private::fence_conformance::sql_admission_tests!(client);

        async fn client(test: &str) -> Option<SqlClient> {
            Some(SqlClient($crate::sql::shared::<$dialect>(test).await?.0))
        }
    };
}
