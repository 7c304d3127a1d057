//! An operator's re-base of a domain whose mark was pushed to a token no one issued: in one
//! transaction, the mark row locked, the domain's counter read, the mark lowered and the re-base
//! recorded in `<schema>.fence_rebases`.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use fence_core::{
    Domain, FenceError, IssuerView, Operation, OwnerId, Rebase, RebaseRecord, Rebaser,
};
use sqlx::Row;

use crate::error::commit;
use crate::error::{corrupt, map_error, token_column};
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
        let (mut tx, locked) = self.lock(domain, operation, None).await?;
        let last = locked.issued;
        // A refusal drops the transaction: nothing changes.
        let to = rebase.decide(domain, locked.hwm, IssuerView::IssuedUpTo(last))?;
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
        let rows = sqlx::query(&format!(
            "SELECT from_mark::text, to_mark::text, operator, reason, \
             (extract(epoch FROM at) * 1000)::bigint FROM {} WHERE domain = $1 ORDER BY seq",
            self.tables().rebases()
        ))
        .bind(domain.as_str())
        .fetch_all(self.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        rows.iter()
            .map(|row| {
                let column = |e: sqlx::Error| corrupt(domain, format!("re-base record: {e}"));
                let from: String = row.try_get(0).map_err(column)?;
                let to: String = row.try_get(1).map_err(column)?;
                let operator: String = row.try_get(2).map_err(column)?;
                let reason: String = row.try_get(3).map_err(column)?;
                let at: i64 = row.try_get(4).map_err(column)?;
                let from = token_column(domain, &from, "re-base's previous mark")?;
                let to = token_column(domain, &to, "re-base's new mark")?;
                let record = OwnerId::new(&operator)
                    .and_then(|operator| Rebase::new(to, from, operator, reason))
                    .map_err(|e| corrupt(domain, format!("re-base record: {e}")))?;
                Ok(RebaseRecord::new(&record, to, unix_ms(at)))
            })
            .collect()
    }
}

fn unix_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
}
