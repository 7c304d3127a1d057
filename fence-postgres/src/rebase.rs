//! An operator's re-base of a domain whose mark was pushed to a token no one issued: in one
//! transaction, the mark row locked, the domain's counter read, the mark lowered and the re-base
//! recorded in `<schema>.fence_rebases`.

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Rebase, RebaseRecord, Rebaser};
use fence_sql::{decide_rebase, unix_ms, MarkRows};

use crate::dialect::PostgresDialect;
use crate::error::{commit, corrupt, map_error};
use crate::fence::PostgresFence;

#[async_trait]
impl Rebaser for PostgresFence {
    /// Re-bases `domain` (see [`Rebase::decide`]): refused unless the mark is still the
    /// reviewed one; the new mark is never below the last token the schema's counter issued
    /// for the domain, and the entry's writer token is lowered to it if above. Returns the
    /// record it added to `fence_rebases` (see [`Rebaser::rebases`]).
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let operation = Operation::Rebase;
        let sql_error = |e| map_error(e, domain, operation, false);
        let (tx, locked) = self.lock(domain, operation, None).await?;
        let (mut tx, to) = decide_rebase::<PostgresDialect>(domain, rebase, tx, &locked).await?;
        let (to_text, from) = (to.to_string(), rebase.expected_mark().to_string());
        let at: i64 = sqlx::query_scalar(&format!(
            "WITH m AS (UPDATE {marks} SET hwm = $2::numeric, \
             writer = CASE WHEN writer > $2::numeric THEN $2::numeric ELSE writer END \
             WHERE domain = $1 AND hwm = $3::numeric RETURNING 1) \
             INSERT INTO {rebases} (domain, from_mark, to_mark, operator, reason) \
             SELECT $1, $3::numeric, $2::numeric, $4, $5 FROM m \
             RETURNING (extract(epoch FROM at) * 1000)::bigint",
            marks = self.tables().marks(),
            rebases = self.tables().rebases(),
        ))
        .bind(domain.as_str())
        .bind(&to_text)
        .bind(&from)
        .bind(rebase.operator().as_str())
        .bind(rebase.reason())
        .fetch_optional(&mut *tx)
        .await
        .map_err(sql_error)?
        .ok_or_else(|| corrupt(domain, "the locked mark row changed during the re-base"))?;
        commit(tx, domain, operation).await?;
        Ok(RebaseRecord::new(rebase, to, unix_ms(at)))
    }

    /// The re-bases of `domain`, oldest first.
    async fn rebases(&self, domain: &Domain) -> Result<Vec<RebaseRecord>, FenceError> {
        self.ensure_shape(domain, Operation::Read).await?;
        fence_sql::rebases(self.pool(), self.tables(), domain).await
    }
}
