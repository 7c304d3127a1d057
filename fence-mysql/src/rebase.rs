//! An operator's re-base of a domain whose mark was pushed to a token no one issued: in one
//! transaction, the mark row locked, the domain's counter read, the mark lowered and the re-base
//! recorded in `fence_rebases`.

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Rebase, RebaseRecord, Rebaser};
use fence_sql::{decide_rebase, unix_ms, MarkRows};

use crate::dialect::MySqlDialect;
use crate::error::{commit, corrupt, map_error};
use crate::fence::MySqlFence;

#[async_trait]
impl Rebaser for MySqlFence {
    /// Re-bases `domain` (see [`Rebase::decide`]): refused unless the mark is still the
    /// reviewed one; the new mark is never below the last token the database's counter issued
    /// for the domain, and the entry's writer token is lowered to it if above. Returns the
    /// record it added to `fence_rebases` (see [`Rebaser::rebases`]).
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let operation = Operation::Rebase;
        let sql_error = |e| map_error(e, domain, operation, false);
        let (tx, locked) = self.lock(domain, operation, None).await?;
        let (mut tx, to) = decide_rebase::<MySqlDialect>(domain, rebase, tx, &locked).await?;
        let lowered = sqlx::query(&format!(
            "UPDATE {} SET hwm = ?, writer = IF(writer > ?, ?, writer) WHERE domain = ? AND hwm = ?",
            self.tables().marks()
        ))
        .bind(to.get())
        .bind(to.get())
        .bind(to.get())
        .bind(domain.as_str().as_bytes())
        .bind(rebase.expected_mark().get())
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?
        .rows_affected();
        if lowered != 1 {
            return Err(corrupt(
                domain,
                "the locked mark row changed during the re-base",
            ));
        }
        let rebases = self.tables().rebases();
        sqlx::query(&format!(
            "INSERT INTO {rebases} (domain, from_mark, to_mark, operator, reason, at) \
             VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))"
        ))
        .bind(domain.as_str().as_bytes())
        .bind(rebase.expected_mark().get())
        .bind(to.get())
        .bind(rebase.operator().as_str().as_bytes())
        .bind(rebase.reason().as_bytes())
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        let at: i64 = sqlx::query_scalar(&format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', at) DIV 1000 FROM {rebases} \
             WHERE seq = LAST_INSERT_ID()"
        ))
        .fetch_one(&mut *tx)
        .await
        .map_err(sql_error)?;
        commit(tx, domain, operation).await?;
        Ok(RebaseRecord::new(rebase, to, unix_ms(at)))
    }

    /// The re-bases of `domain`, oldest first.
    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError> {
        self.ensure_shape(domain, Operation::Read).await?;
        fence_sql::rebases(self.pool(), self.tables(), domain).await
    }
}
