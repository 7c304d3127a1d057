//! Fenced transactions against the shared server: a stale holder's SQL never commits, holders
//! of one domain serialize on the mark row, a lost commit answer is ambiguous and a retry with
//! the same op id learns the outcome, and races over many domains keep commit order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fence_conformance::proxy::TcpProxy;
use fence_conformance::services::{assert_fenced, domain as d, put, token as t};
use fence_core::{
    Domain, EqualTokenPolicy, Fence, FenceError, FencedStore, InvalidInput, Observed, OpKind,
    OperationId, WriteRequest,
};
use fence_postgres::{PostgresFence, Transacted, TransactionError, TransactionRequest};
use fence_testkit::postgres::{pool, shared_url};
use sqlx::PgPool;

/// A migrated fence in a fresh schema, and a user table `<schema>.ledger` that logs, in commit
/// order, the token of every transaction that committed.
async fn with_ledger(test: &str) -> Option<(Observed<PostgresFence>, PgPool, String)> {
    let (fence, pool) = support::shared(test).await?;
    let ledger = format!("{}.ledger", fence.schema());
    sqlx::query(&format!(
        "CREATE TABLE {ledger} (seq bigserial PRIMARY KEY, domain text NOT NULL, token numeric(20,0) NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    Some((fence, pool, ledger))
}

/// Runs a fenced transaction that logs its token in `ledger`.
async fn log_token(
    fence: &Observed<PostgresFence>,
    ledger: &str,
    request: &TransactionRequest,
) -> Result<Transacted<()>, TransactionError<sqlx::Error>> {
    let sql = format!("INSERT INTO {ledger} (domain, token) VALUES ($1, $2::numeric)");
    let (domain, token) = (
        request.domain().as_str().to_owned(),
        request.token().to_string(),
    );
    fence
        .transaction(request, |conn| {
            Box::pin(async move {
                sqlx::query(&sql)
                    .bind(domain)
                    .bind(token)
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        })
        .await
}

/// The tokens logged for `domain`, in commit order.
async fn logged(pool: &PgPool, ledger: &str, domain: &Domain) -> Vec<u64> {
    let rows: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT token::text FROM {ledger} WHERE domain = $1 ORDER BY seq"
    ))
    .bind(domain.as_str())
    .fetch_all(pool)
    .await
    .unwrap();
    rows.iter().map(|r| r.parse().unwrap()).collect()
}

/// The fence's error of a refused transaction (panics on a work error).
fn fence_error<E: std::fmt::Debug>(error: TransactionError<E>) -> FenceError {
    match error {
        TransactionError::Fence(e) => e,
        other => panic!("expected a fence error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stale_holders_work_never_runs_and_a_failed_work_commits_nothing() {
    let Some((fence, pool, ledger)) = with_ledger("stale_txn").await else {
        return;
    };
    let domain = d("account");
    log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(6)),
    )
    .await
    .unwrap();

    // The stale holder: refused before its work runs.
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let stale = fence
        .transaction(&TransactionRequest::new(domain.clone(), t(5)), |_conn| {
            Box::pin(async move {
                flag.store(true, Ordering::SeqCst);
                Ok::<(), sqlx::Error>(())
            })
        })
        .await;
    assert_fenced(stale.map_err(fence_error), 5, 6);
    assert!(!ran.load(Ordering::SeqCst), "a stale holder's work ran");

    // A newer holder whose work fails: its statements and the mark roll back together.
    let failing = fence
        .transaction(&TransactionRequest::new(domain.clone(), t(9)), {
            let ledger = ledger.clone();
            |conn| {
                Box::pin(async move {
                    sqlx::query(&format!(
                        "INSERT INTO {ledger} (domain, token) VALUES ('account', 9)"
                    ))
                    .execute(&mut *conn)
                    .await?;
                    sqlx::query("SELECT 1/0").execute(&mut *conn).await
                })
            }
        })
        .await;
    assert!(
        matches!(&failing, Err(TransactionError::Work { domain: failed, .. }) if *failed == domain),
        "{failing:?}"
    );
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(6)));
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![6]);

    // A dropped (never committed) admitted transaction rolls back too.
    let mut tx = support::admitted(&fence, &TransactionRequest::new(domain.clone(), t(10))).await;
    sqlx::query(&format!(
        "INSERT INTO {ledger} (domain, token) VALUES ('account', 10)"
    ))
    .execute(&mut *tx)
    .await
    .unwrap();
    drop(tx);
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(6)));
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holders_of_one_domain_serialize_on_the_mark_row() {
    let Some((fence, pool, ledger)) = with_ledger("serialize").await else {
        return;
    };
    let domain = d("account");
    let mut old = support::admitted(&fence, &TransactionRequest::new(domain.clone(), t(5))).await;
    // The new holder waits on the mark row while the old one's transaction is open.
    let newer = tokio::spawn({
        let (fence, ledger, domain) = (fence.clone(), ledger.clone(), domain.clone());
        async move { log_token(&fence, &ledger, &TransactionRequest::new(domain, t(6))).await }
    });
    support::wait_for_lock_waiters(&pool, fence.schema(), 1).await;
    assert!(!newer.is_finished(), "token 6 did not wait for the lock");
    sqlx::query(&format!(
        "INSERT INTO {ledger} (domain, token) VALUES ('account', 5)"
    ))
    .execute(&mut *old)
    .await
    .unwrap();
    old.commit().await.unwrap();
    let newer = newer.await.unwrap().unwrap();
    assert_eq!(newer.previous_high_water_mark(), Some(t(5)));
    let late = log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(5)),
    )
    .await;
    assert_fenced(late.map_err(fence_error), 5, 6);
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![5, 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_whose_answer_is_lost_is_ambiguous_and_its_retry_learns_the_outcome() {
    let Some((_, direct, ledger)) = with_ledger("lost_commit").await else {
        return;
    };
    let url = shared_url().unwrap();
    let upstream = fence_testkit::postgres::address(&url).parse().unwrap();
    let proxy = TcpProxy::start(upstream).await.unwrap();
    let proxied = url.replace(&upstream.to_string(), &proxy.address().to_string());
    let schema = ledger.trim_end_matches(".ledger");
    let fence = PostgresFence::builder(pool(&proxied).await, schema)
        .build()
        .unwrap();
    let domain = d("account");
    let insert = format!("INSERT INTO {ledger} (domain, token) VALUES ('account', $1::numeric)");

    // Cut while the commit's message is answered: the mark's statement and COMMIT travel in
    // one message (the fence adds no round trip to the commit), so the server committed and
    // only the answer was lost: `Ambiguous`, never a guess; the retry with the same op id
    // learns it committed.
    let first = TransactionRequest::new(domain.clone(), t(3))
        .with_op_id(OperationId::new("statement-1").unwrap());
    let mut tx = support::admitted(&fence, &first).await;
    sqlx::query(&insert)
        .bind("3")
        .execute(&mut *tx)
        .await
        .unwrap();
    proxy.settle(Duration::from_millis(50)).await;
    proxy.lose_replies();
    let cut = tx.commit().await;
    proxy.forward();
    assert!(
        matches!(cut, Err(FenceError::Ambiguous { .. })),
        "a commit whose answer was lost must be ambiguous: {cut:?}"
    );
    let retry = log_token(&fence, &ledger, &first).await.unwrap();
    assert_eq!(
        retry,
        Transacted::Duplicate {
            previous_high_water_mark: None
        },
        "the retry replays the committed transaction"
    );
    assert_eq!(logged(&direct, &ledger, &domain).await, vec![3]);

    // Cut once COMMIT was sent (a deferred trigger keeps the server busy committing): the
    // outcome is unknown, so `Ambiguous`; the retry with the same op id learns it committed.
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION {schema}.slow_commit() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN PERFORM pg_sleep(2); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON {ledger}
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.slow_commit();"
    ))
    .execute(&direct)
    .await
    .unwrap();
    let second = TransactionRequest::new(domain.clone(), t(4))
        .with_op_id(OperationId::new("statement-2").unwrap());
    let mut tx = support::admitted(&fence, &second).await;
    sqlx::query(&insert)
        .bind("4")
        .execute(&mut *tx)
        .await
        .unwrap();
    let committing = tokio::spawn(tx.commit());
    // The server is inside COMMIT (the deferred trigger sleeps there): cut it now.
    support::wait_for_sleeping_commit(&direct).await;
    proxy.cut_all();
    let cut = committing.await.unwrap();
    assert!(
        matches!(cut, Err(FenceError::Ambiguous { .. })),
        "a commit whose answer was lost must be ambiguous: {cut:?}"
    );
    let retry = log_token(&fence, &ledger, &second).await.unwrap();
    assert_eq!(
        retry,
        Transacted::Duplicate {
            previous_high_water_mark: Some(t(3))
        },
        "the retry replays the committed transaction"
    );
    assert_eq!(logged(&direct, &ledger, &domain).await, vec![3, 4]);

    // The server shuts the connection down while committing (the backend is terminated by a
    // deferred trigger, before the commit record): a FATAL answer to COMMIT is `Ambiguous` too,
    // and the retry with the same op id finds nothing committed, so it runs.
    sqlx::raw_sql(&format!(
        "CREATE TABLE {schema}.doomed (id int);
         CREATE FUNCTION {schema}.terminate() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$;
         CREATE CONSTRAINT TRIGGER terminate AFTER INSERT ON {schema}.doomed
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.terminate();"
    ))
    .execute(&direct)
    .await
    .unwrap();
    let fence = PostgresFence::builder(direct.clone(), schema)
        .build()
        .unwrap();
    let third = TransactionRequest::new(domain.clone(), t(5))
        .with_op_id(OperationId::new("statement-3").unwrap());
    let mut tx = support::admitted(&fence, &third).await;
    sqlx::query(&format!("INSERT INTO {schema}.doomed VALUES (1)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let shut = tx.commit().await;
    assert!(
        matches!(shut, Err(FenceError::Ambiguous { .. })),
        "a commit answered by a shutdown must be ambiguous: {shut:?}"
    );
    let retry = log_token(&fence, &ledger, &third).await.unwrap();
    assert!(
        !retry.is_duplicate(),
        "nothing had committed: the retry runs"
    );
    assert_eq!(logged(&direct, &ledger, &domain).await, vec![3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_over_many_domains_commit_in_token_order() {
    let Some((fence, pool, ledger)) = with_ledger("race_txn").await else {
        return;
    };
    let domains: Vec<Domain> = (0..6).map(|i| d(&format!("account-{i}"))).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for holder in 0..10_u64 {
        let (fence, ledger, domains) = (fence.clone(), ledger.clone(), domains.clone());
        tasks.spawn(async move {
            let mut outcomes = Vec::new();
            for round in 0..12_u64 {
                // Mixed tokens: holders take turns being newest, and some arrive late.
                let token = 1 + (holder * 7 + round * 3) % 25;
                let domain = domains[((holder + round) % 6) as usize].clone();
                let policy = if round % 4 == 0 {
                    EqualTokenPolicy::Strict
                } else {
                    EqualTokenPolicy::SameOwner
                };
                let request = TransactionRequest::new(domain.clone(), t(token)).with_policy(policy);
                let result = log_token(&fence, &ledger, &request).await;
                outcomes.push((domain, token, result));
            }
            outcomes
        });
    }
    let mut committed = std::collections::HashMap::<Domain, Vec<u64>>::new();
    let mut fenced = 0;
    while let Some(outcomes) = tasks.join_next().await {
        for (domain, token, result) in outcomes.unwrap() {
            match result {
                Ok(Transacted::Committed { .. }) => {
                    committed.entry(domain).or_default().push(token)
                }
                Err(TransactionError::Fence(FenceError::Fenced { .. })) => fenced += 1,
                other => panic!("{domain} token {token}: {other:?}"),
            }
        }
    }
    assert!(fenced > 0, "the race produced no stale holder");
    for domain in &domains {
        let log = logged(&pool, &ledger, domain).await;
        let mut mine = committed.remove(domain).unwrap_or_default();
        mine.sort_unstable();
        let mut sorted_log = log.clone();
        sorted_log.sort_unstable();
        assert_eq!(
            sorted_log, mine,
            "{domain}: the committed runs are the logged ones"
        );
        assert!(
            log.windows(2).all(|w| w[0] <= w[1]),
            "{domain}: a token below an earlier commit committed: {log:?}"
        );
        assert_eq!(
            fence.high_water_mark(domain).await.unwrap(),
            log.last().map(|&n| t(n)),
            "{domain}: the mark is the last committed token"
        );
    }
}

#[tokio::test]
async fn an_op_id_belongs_to_a_write_or_a_transaction_not_both() {
    let Some((fence, _, ledger)) = with_ledger("op_kinds").await else {
        return;
    };
    let domain = d("account");
    let op = OperationId::new("pay-1").unwrap();
    fence
        .write(&WriteRequest::put(domain.clone(), t(2), "v").with_op_id(op.clone()))
        .await
        .unwrap();
    let reused = log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(2)).with_op_id(op),
    )
    .await;
    let reused = fence_error(reused.unwrap_err());
    assert!(
        matches!(
            &reused,
            FenceError::InvalidInput(InvalidInput::OpIdReused {
                first: OpKind::Write,
                now: OpKind::Transaction,
                ..
            })
        ),
        "a write's op id reused for a transaction: {reused:?}"
    );
    assert!(
        reused.to_string().contains("fenced transaction"),
        "{reused}"
    );
    let op = OperationId::new("pay-2").unwrap();
    log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(2)).with_op_id(op.clone()),
    )
    .await
    .unwrap();
    let reused = fence
        .write(&WriteRequest::put(domain.clone(), t(2), "w").with_op_id(op))
        .await;
    assert!(
        matches!(
            reused,
            Err(FenceError::InvalidInput(InvalidInput::OpIdReused {
                first: OpKind::Transaction,
                now: OpKind::Write,
                ..
            }))
        ),
        "{reused:?}"
    );
    // A store write and a transaction share the domain's mark.
    put(&fence, &domain, 4, "newer").await.unwrap();
    let stale = log_token(&fence, &ledger, &TransactionRequest::new(domain, t(3))).await;
    assert_fenced(stale.map_err(fence_error), 3, 4);
}

/// An operation record Fence never writes (a write that produced revision 0, a kind it does
/// not know) is corrupt state to every reader of it alike — a write, a fenced transaction and
/// the operator's list — never a reused op id, and nothing runs.
#[tokio::test]
async fn a_foreign_operation_record_is_corrupt_to_every_reader() {
    let Some((fence, pool, ledger)) = with_ledger("op_foreign").await else {
        return;
    };
    for (name, kind, revision) in [("rev0", "write", Some(0i64)), ("odd", "refund", None)] {
        let domain = d(name);
        put(&fence, &domain, 2, "kept").await.unwrap();
        sqlx::query(&format!(
            "INSERT INTO {}.fence_ops (domain, token, op_id, kind, revision) VALUES ($1, 3, 'op', $2, $3)",
            fence.schema()
        ))
        .bind(domain.as_str())
        .bind(kind)
        .bind(revision)
        .execute(&pool)
        .await
        .unwrap();
        let op = OperationId::new("op").unwrap();
        let write = fence
            .write(&WriteRequest::put(domain.clone(), t(3), "w").with_op_id(op.clone()))
            .await;
        let transaction = log_token(
            &fence,
            &ledger,
            &TransactionRequest::new(domain.clone(), t(3)).with_op_id(op),
        )
        .await
        .map_err(fence_error);
        let listed = fence.remembered_ops(&domain).await;
        for (what, corrupt) in [
            (
                "write",
                matches!(write, Err(FenceError::CorruptState { .. })),
            ),
            (
                "transaction",
                matches!(transaction, Err(FenceError::CorruptState { .. })),
            ),
            (
                "list",
                matches!(listed, Err(FenceError::CorruptState { .. })),
            ),
        ] {
            assert!(
                corrupt,
                "{name} {what}: {write:?} / {transaction:?} / {listed:?}"
            );
        }
        assert_eq!(logged(&pool, &ledger, &domain).await, Vec::<u64>::new());
        assert_eq!(
            fence_conformance::services::value_of(&fence, &domain)
                .await
                .as_deref(),
            Some("kept")
        );
    }
}

#[tokio::test]
async fn a_transaction_aborted_by_its_own_statement_commits_nothing() {
    let Some((fence, pool, ledger)) = with_ledger("aborted").await else {
        return;
    };
    let domain = d("account");
    log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(3)),
    )
    .await
    .unwrap();
    // The work swallows the error of a statement: the transaction is aborted, and its COMMIT
    // would answer ROLLBACK without an error.
    let request = TransactionRequest::new(domain.clone(), t(4))
        .with_op_id(OperationId::new("swallowed").unwrap());
    let swallowed = fence
        .transaction(&request, {
            let ledger = ledger.clone();
            |conn| {
                Box::pin(async move {
                    sqlx::query(&format!(
                        "INSERT INTO {ledger} (domain, token) VALUES ('account', 4)"
                    ))
                    .execute(&mut *conn)
                    .await?;
                    let failed = sqlx::query("SELECT 1/0").execute(&mut *conn).await;
                    Ok::<bool, sqlx::Error>(failed.is_err())
                })
            }
        })
        .await;
    match swallowed {
        Err(TransactionError::Fence(error)) => {
            assert!(!error.is_fenced(), "{error}");
            assert!(error.to_string().contains("aborted"), "{error}");
        }
        other => panic!("an aborted transaction reported {other:?}"),
    }
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(3)));
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![3]);
    // Nothing was remembered either: the same op id runs (and commits) now.
    let retry = log_token(&fence, &ledger, &request).await.unwrap();
    assert!(!retry.is_duplicate());
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_of_one_transaction_queued_behind_the_lock_run_once() {
    let Some((fence, pool, ledger)) = with_ledger("queued_txn").await else {
        return;
    };
    let domain = d("account");
    let holder = support::admitted(&fence, &TransactionRequest::new(domain.clone(), t(1))).await;
    let request = TransactionRequest::new(domain.clone(), t(2))
        .with_op_id(OperationId::new("statement").unwrap());
    let submissions: Vec<_> = (0..2)
        .map(|_| {
            let (fence, ledger, request) = (fence.clone(), ledger.clone(), request.clone());
            tokio::spawn(async move { log_token(&fence, &ledger, &request).await })
        })
        .collect();
    support::wait_for_lock_waiters(&pool, fence.schema(), 2).await;
    holder.commit().await.unwrap();
    let mut duplicates = 0;
    for submission in submissions {
        duplicates += usize::from(submission.await.unwrap().unwrap().is_duplicate());
    }
    assert_eq!(duplicates, 1, "one runs, the other replays");
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_sent_inside_is_an_error_and_never_lowers_the_mark() {
    let Some((fence, pool, ledger)) = with_ledger("commit_inside").await else {
        return;
    };
    let domain = d("it's a \\ domain");
    log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(3)),
    )
    .await
    .unwrap();
    let mut tx = support::admitted(&fence, &TransactionRequest::new(domain.clone(), t(4))).await;
    // The work ends the transaction itself: the lock is gone, and a newer holder (token 9)
    // commits meanwhile.
    sqlx::raw_sql("COMMIT").execute(&mut *tx).await.unwrap();
    sqlx::query(&format!(
        "UPDATE {}.fence_marks SET hwm = 9 WHERE domain = $1",
        fence.schema()
    ))
    .bind(domain.as_str())
    .execute(&pool)
    .await
    .unwrap();
    let committed = tx.commit().await;
    match &committed {
        Err(error) => assert!(error.to_string().contains("changed under it"), "{error}"),
        Ok(()) => panic!("a transaction that ended inside reported success"),
    }
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(9)));
    // The connection went back to the pool usable: the domain's next holder commits.
    log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(10)),
    )
    .await
    .unwrap();
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![3, 10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_ended_inside_is_an_error_and_remembers_nothing() {
    let Some((fence, pool, ledger)) = with_ledger("ended_inside").await else {
        return;
    };
    let domain = d("account");
    log_token(
        &fence,
        &ledger,
        &TransactionRequest::new(domain.clone(), t(3)),
    )
    .await
    .unwrap();
    let insert = format!("INSERT INTO {ledger} (domain, token) VALUES ('account', 4)");
    // A raise (4 over 3) whose work sends ROLLBACK: the work is gone, so the commit must fail
    // and remember nothing (else the retry would answer Duplicate for work that never ran).
    let raise = TransactionRequest::new(domain.clone(), t(4))
        .with_op_id(OperationId::new("rolled-back").unwrap());
    // The same holder's next transaction (4 at mark 4: the mark is kept) whose work sends
    // COMMIT: its statements committed alone, without the fence's record; an error too.
    let keep = TransactionRequest::new(domain.clone(), t(4))
        .with_op_id(OperationId::new("committed-inside").unwrap());
    for (request, end, logged_after) in [
        (&raise, "ROLLBACK", vec![3]),
        (&keep, "COMMIT", vec![3, 4, 4]),
    ] {
        let mut tx = support::admitted(&fence, request).await;
        sqlx::raw_sql(&insert).execute(&mut *tx).await.unwrap();
        sqlx::raw_sql(end).execute(&mut *tx).await.unwrap();
        match tx.commit().await {
            Err(error) => assert!(error.to_string().contains("changed under it"), "{error}"),
            Ok(()) => panic!("a transaction whose work sent {end} reported success"),
        }
        assert_eq!(logged(&pool, &ledger, &domain).await, logged_after, "{end}");
        // Nothing was remembered: the retry with the same op id runs.
        let retry = log_token(&fence, &ledger, request).await.unwrap();
        assert!(
            !retry.is_duplicate(),
            "{end}: the retry was answered as a duplicate"
        );
        assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(4)));
    }
    assert_eq!(logged(&pool, &ledger, &domain).await, vec![3, 4, 4, 4]);
}
