//! fence-mysql on the shared MariaDB: the per-row form and its affected-rows trap, exact u64
//! tokens, fenced transactions that a stale holder never reaches, a deadlock's rollback never
//! committed as a success, a lost COMMIT answer reported as ambiguous and learnable by op id,
//! and tables of another shape refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_conformance::proxy::{Mode, TcpProxy};
use fence_core::{
    BoxFuture, Domain, EqualTokenPolicy, Fence, FenceError, FencedStore, FencedStoreExt,
    FencingToken, OperationId, Transacted, TransactionRequest,
};
use fence_mysql::{Begun, MySqlFence, RowFence};
use fence_testkit::mysql::{address, pool, shared_url};
use support::shared;

/// Work that runs one statement in the fenced transaction.
fn run_sql(
    sql: String,
) -> impl for<'c> FnOnce(&'c mut sqlx::MySqlConnection) -> BoxFuture<'c, Result<(), sqlx::Error>> + Send
{
    move |conn| Box::pin(async move { sqlx::query(&sql).execute(conn).await.map(|_| ()) })
}

fn t(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn d(name: &str) -> Domain {
    Domain::new(name).unwrap()
}

/// `accounts (id, balance, fence_token)` in the test's database, with row 7 at balance 100.
async fn accounts(pool: &sqlx::MySqlPool, database: &str) -> RowFence {
    sqlx::query(&format!(
        "CREATE TABLE {database}.accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL, \
         fence_token BIGINT UNSIGNED NULL)"
    ))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {database}.accounts (id, balance) VALUES (7, 100)"
    ))
    .execute(pool)
    .await
    .unwrap();
    RowFence::new(database, "accounts", "id", "fence_token").unwrap()
}

async fn balance(pool: &sqlx::MySqlPool, database: &str) -> (i64, Option<u64>) {
    sqlx::query_as(&format!(
        "SELECT balance, fence_token FROM {database}.accounts WHERE id = 7"
    ))
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_row_update_that_changes_nothing_is_still_a_success() {
    let Some((fence, pool)) = shared("row_trap").await else {
        return;
    };
    let rows = accounts(&pool, fence.database()).await;
    let mut conn = pool.acquire().await.unwrap();
    let set_90 = |set: &mut sqlx::QueryBuilder<'_, sqlx::MySql>| {
        set.push("balance = ").push_bind(90_i64);
    };
    rows.update(&mut conn, 7_i64, t(5), set_90).await.unwrap();
    // The same values under the same token: a changed-rows count would be 0 and look like a
    // refusal. It matched, so it is a success, not `Fenced`.
    rows.update(&mut conn, 7_i64, t(5), set_90).await.unwrap();
    // Because sqlx connects with CLIENT_FOUND_ROWS (matched rows), which RowFence relies on:
    // checked here, so a driver that stops asking for it fails this test.
    let matched = sqlx::query(&format!(
        "UPDATE {}.accounts SET balance = 90 WHERE id = 7",
        fence.database()
    ))
    .execute(&mut *conn)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(matched, 1, "sqlx no longer reports matched rows");
    assert_eq!(balance(&pool, fence.database()).await, (90, Some(5)));
    // Under the strict policy the equal token is refused.
    let strict = rows.clone().with_policy(EqualTokenPolicy::Strict);
    let refused = strict.update(&mut conn, 7_i64, t(5), set_90).await;
    assert!(
        matches!(refused, Err(FenceError::Fenced { current, .. }) if current == t(5)),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_stale_row_update_is_fenced_and_changes_nothing() {
    let Some((fence, pool)) = shared("row_stale").await else {
        return;
    };
    let rows = accounts(&pool, fence.database()).await;
    let mut conn = pool.acquire().await.unwrap();
    rows.update(&mut conn, 7_i64, t(8), |set| {
        set.push("balance = ").push_bind(80_i64);
    })
    .await
    .unwrap();
    let stale = rows
        .update(&mut conn, 7_i64, t(7), |set| {
            set.push("balance = ").push_bind(1_i64);
        })
        .await;
    assert!(
        matches!(&stale, Err(FenceError::Fenced { presented, current, .. })
            if *presented == t(7) && *current == t(8)),
        "{stale:?}"
    );
    assert_eq!(balance(&pool, fence.database()).await, (80, Some(8)));
    let missing = rows
        .update(&mut conn, 8_i64, t(9), |set| {
            set.push("balance = ").push_bind(1_i64);
        })
        .await;
    assert!(
        matches!(&missing, Err(e) if e.to_string().contains("no row")),
        "{missing:?}"
    );
}

#[tokio::test]
async fn tokens_are_exact_up_to_u64_max() {
    let Some((fence, pool)) = shared("u64").await else {
        return;
    };
    let rows = accounts(&pool, fence.database()).await;
    let mut conn = pool.acquire().await.unwrap();
    for token in [(1 << 53) + 1, 1 << 63, u64::MAX - 1, u64::MAX] {
        rows.update(&mut conn, 7_i64, t(token), |set| {
            set.push("balance = balance + 1");
        })
        .await
        .unwrap();
        assert_eq!(balance(&pool, fence.database()).await.1, Some(token));
    }
    let below = rows
        .update(&mut conn, 7_i64, t(u64::MAX - 1), |set| {
            set.push("balance = 0");
        })
        .await;
    assert!(below.is_err_and(|e| e.is_fenced()));
    // The store and the transaction entry point hold them exactly too.
    let domain = d("u64");
    fence.put(&domain, t(1 << 63), "a").await.unwrap();
    assert!(fence
        .put(&domain, t((1 << 63) - 1), "b")
        .await
        .is_err_and(|e| e.is_fenced()));
    let request = TransactionRequest::new(domain.clone(), t(u64::MAX));
    fence
        .transaction(&request, |_| Box::pin(async { Ok::<_, sqlx::Error>(()) }))
        .await
        .unwrap();
    assert_eq!(
        fence.high_water_mark(&domain).await.unwrap(),
        Some(t(u64::MAX))
    );
}

#[tokio::test]
async fn a_stale_holder_runs_none_of_its_sql() {
    let Some((fence, pool)) = shared("stale_tx").await else {
        return;
    };
    let database = fence.database().to_owned();
    accounts(&pool, &database).await;
    let domain = d("account-7");
    let debit = |amount: i64| {
        run_sql(format!(
            "UPDATE {database}.accounts SET balance = balance - {amount} WHERE id = 7"
        ))
    };
    fence
        .transaction(&TransactionRequest::new(domain.clone(), t(4)), debit(10))
        .await
        .unwrap();
    let stale = fence
        .transaction(&TransactionRequest::new(domain.clone(), t(3)), debit(50))
        .await;
    assert!(
        matches!(&stale, Err(fence_core::TransactionError::Fence(e)) if e.is_fenced()),
        "{stale:?}"
    );
    assert_eq!(balance(&pool, &database).await.0, 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deadlock_rollback_is_never_committed_as_a_success() {
    let Some((fence, pool)) = shared("deadlock").await else {
        return;
    };
    let database = fence.database().to_owned();
    sqlx::query(&format!(
        "CREATE TABLE {database}.pair (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {database}.pair VALUES (1, 0), (2, 0)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let bump = |id: i64| format!("UPDATE {database}.pair SET n = n + 1 WHERE id = {id}");
    // Both domains have a mark row already: a statement sent after the rollback would find it.
    for domain in ["left", "right"] {
        fence.claim(&d(domain), t(1)).await.unwrap();
    }
    let admitted = |domain: &str| {
        let fence = fence.clone();
        let request = TransactionRequest::new(d(domain), t(2));
        async move {
            match fence.begin(&request).await.unwrap() {
                Begun::Admitted(tx) => tx,
                other => panic!("{other:?}"),
            }
        }
    };
    let mut first = admitted("left").await;
    let mut second = admitted("right").await;
    sqlx::query(&bump(1)).execute(&mut *first).await.unwrap();
    sqlx::query(&bump(2)).execute(&mut *second).await.unwrap();
    // Each now waits for the other's row: the server rolls one back (1213).
    let crossing = bump(2);
    let first_waits = tokio::spawn(async move {
        let result = sqlx::query(&crossing).execute(&mut *first).await;
        (first, result)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second_result = sqlx::query(&bump(1)).execute(&mut *second).await;
    let (first, first_result) = first_waits.await.unwrap();
    let (victim, survivor, domain) = match (&first_result, &second_result) {
        (Err(_), Ok(_)) => (first, second, "left"),
        (Ok(_), Err(_)) => (second, first, "right"),
        other => panic!("expected one deadlock victim, got {other:?}"),
    };
    // The caller ignores the deadlock and commits: never a success, and the mark stays.
    let committed = victim.commit().await;
    assert!(
        committed.is_err(),
        "a rolled-back transaction committed: {committed:?}"
    );
    survivor.commit().await.unwrap();
    assert_eq!(
        fence.high_water_mark(&d(domain)).await.unwrap(),
        Some(t(1)),
        "the victim's mark was not raised"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_commit_answer_is_ambiguous_and_the_op_id_learns_it() {
    let Some((fence, direct)) = shared("lost_commit").await else {
        return;
    };
    let url = shared_url().unwrap();
    let upstream = address(&url).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let proxied = url.replace(&upstream.to_string(), &proxy.address().to_string());
    let through = MySqlFence::builder(pool(&proxied).await, fence.database())
        .build()
        .unwrap();
    let database = fence.database().to_owned();
    sqlx::query(&format!(
        "CREATE TABLE {database}.ledger (token BIGINT UNSIGNED NOT NULL)"
    ))
    .execute(&direct)
    .await
    .unwrap();
    let domain = d("account");
    let request =
        TransactionRequest::new(domain.clone(), t(4)).with_op_id(OperationId::new("s-1").unwrap());
    let insert = format!("INSERT INTO {database}.ledger VALUES (4)");
    // The COMMIT reaches the server; its answer is lost.
    proxy.set_mode(Mode::LoseReplyTo(b"COMMIT"));
    let cut = through.transaction(&request, run_sql(insert.clone())).await;
    proxy.forward();
    assert!(
        matches!(
            &cut,
            Err(fence_core::TransactionError::Fence(
                FenceError::Ambiguous { .. }
            ))
        ),
        "a commit whose answer was lost must be ambiguous: {cut:?}"
    );
    // The retry with the same op id learns that it committed, and runs nothing again.
    let retry = fence.transaction(&request, run_sql(insert)).await.unwrap();
    assert_eq!(
        retry,
        Transacted::Duplicate {
            previous_high_water_mark: None
        }
    );
    let rows: Vec<u64> = sqlx::query_scalar(&format!("SELECT token FROM {database}.ledger"))
        .fetch_all(&direct)
        .await
        .unwrap();
    assert_eq!(rows, vec![4], "the work ran once");
}

#[tokio::test]
async fn tables_of_another_shape_fail_closed() {
    let Some(url) = shared_url() else {
        return;
    };
    let pool = pool(&url).await;
    let database = fence_testkit::mysql::unique_database("shape");
    sqlx::query(&format!("CREATE DATABASE {database}"))
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(&format!(
        "CREATE TABLE {database}.fence_marks (domain VARCHAR(256) PRIMARY KEY, hwm BIGINT)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let migrated = fence_mysql::migrate(&pool, &database).await;
    assert!(
        matches!(&migrated, Err(e) if e.to_string().contains("expected")),
        "{migrated:?}"
    );
    let fence = MySqlFence::builder(pool.clone(), &database)
        .build()
        .unwrap();
    let write = fence.put(&d("x"), t(1), "v").await;
    assert!(
        matches!(write, Err(FenceError::CorruptState { .. })),
        "{write:?}"
    );
    // Nothing was altered: the foreign table keeps its shape.
    let columns: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'fence_marks'",
    )
    .bind(&database)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(columns, 2);
    let invalid = MySqlFence::builder(pool, "Not-A-Name").build();
    assert!(invalid.is_err());
}

#[tokio::test]
async fn an_implicit_commit_inside_commits_the_mark_with_the_work() {
    let Some((fence, pool)) = shared("implicit").await else {
        return;
    };
    let database = fence.database().to_owned();
    accounts(&pool, &database).await;
    let domain = d("account-7");
    fence.claim(&domain, t(3)).await.unwrap();
    let request =
        TransactionRequest::new(domain.clone(), t(4)).with_op_id(OperationId::new("ddl").unwrap());
    let Begun::Admitted(mut tx) = fence.begin(&request).await.unwrap() else {
        panic!("admitted");
    };
    sqlx::query(&format!(
        "UPDATE {database}.accounts SET balance = 50 WHERE id = 7"
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    // DDL commits the open transaction: the update, and the mark raised at begin with it.
    sqlx::query(&format!("CREATE TABLE {database}.audit (n INT)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let committed = tx.commit().await;
    assert!(
        matches!(committed, Err(FenceError::Ambiguous { .. })),
        "an ended transaction must be ambiguous, not a success: {committed:?}"
    );
    assert_eq!(
        balance(&pool, &database).await.0,
        50,
        "the update committed"
    );
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(4)));
    // A stale holder is refused after it, and the op id learns that it committed.
    let stale = fence
        .begin(&TransactionRequest::new(domain.clone(), t(3)))
        .await;
    assert!(stale.is_err_and(|e| e.is_fenced()));
    let retry = fence
        .transaction(&request, run_sql("DO 0".into()))
        .await
        .unwrap();
    assert!(retry.is_duplicate(), "{retry:?}");
}

#[tokio::test]
async fn a_committed_mark_of_null_fails_closed() {
    let Some((fence, pool)) = shared("null_mark").await else {
        return;
    };
    let domain = d("nulled");
    fence.put(&domain, t(5), "v").await.unwrap();
    sqlx::query(&format!(
        "UPDATE {}.fence_marks SET hwm = NULL, state = NULL, revision = NULL, writer = NULL \
         WHERE domain = 'nulled'",
        fence.database()
    ))
    .execute(&pool)
    .await
    .unwrap();
    let write = fence.put(&domain, t(1), "stale").await;
    assert!(
        matches!(write, Err(FenceError::CorruptState { .. })),
        "{write:?}"
    );
    let begun = fence
        .begin(&TransactionRequest::new(domain.clone(), t(1)))
        .await;
    assert!(
        matches!(begun, Err(FenceError::CorruptState { .. })),
        "{begun:?}"
    );
    assert!(matches!(
        fence.read(&domain).await,
        Err(FenceError::CorruptState { .. })
    ));
    // Left as it was: the refusal rolled back.
    let hwm: Option<u64> = sqlx::query_scalar(&format!(
        "SELECT hwm FROM {}.fence_marks WHERE domain = 'nulled'",
        fence.database()
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(hwm, None);
}

/// A harness over a fence whose sessions run READ COMMITTED.
struct ReadCommitted(fence_core::Observed<MySqlFence>);

#[async_trait::async_trait]
impl fence_conformance::StoreHarness for ReadCommitted {
    fn store(&self) -> std::sync::Arc<dyn fence_core::FencedStore> {
        std::sync::Arc::new(self.0.clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_sessions_hold_the_contract() {
    let Some((fence, _)) = shared("read_committed").await else {
        return;
    };
    let url = shared_url().unwrap();
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(16)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(
                    conn,
                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                )
                .await
                .map(|_| ())
            })
        })
        .connect(&url)
        .await
        .unwrap();
    let isolation: String = sqlx::query_scalar("SELECT @@tx_isolation")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(isolation, "READ-COMMITTED");
    let harness = ReadCommitted(MySqlFence::builder(pool, fence.database()).build().unwrap());
    let ns = fence_conformance::Namespace::new("read_committed");
    for (name, result) in [
        (
            "every vector",
            fence_conformance::store::every_vector_agrees_with_the_rule(&harness, &ns).await,
        ),
        (
            "mixed tokens race",
            fence_conformance::store::concurrent_writers_with_mixed_tokens(&harness, &ns).await,
        ),
        (
            "claims and writes race",
            fence_conformance::store::concurrent_claims_and_writes(&harness, &ns).await,
        ),
    ] {
        if let Err(failure) = result {
            panic!("{name} under READ COMMITTED: {failure}");
        }
    }
}
