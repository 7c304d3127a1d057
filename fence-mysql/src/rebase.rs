//! An operator's re-base of a domain whose mark was pushed to a token no one issued: in one
//! transaction, the mark row locked, the domain's counter read, the mark lowered and the re-base
//! recorded in `fence_rebases`.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use fence_core::{
    Domain, FenceError, IssuerView, Operation, OwnerId, Rebase, RebaseRecord, Rebaser,
};
use sqlx::Row;

use crate::error::commit;
use crate::error::{corrupt, map_error};
use crate::fence::MySqlFence;
use crate::mark::token_column;
use fence_sql::release;

#[async_trait]
impl Rebaser for MySqlFence {
    /// Re-bases `domain` (see [`Rebase::decide`]): refused unless the mark is still the
    /// reviewed one; the new mark is never below the last token the database's counter issued
    /// for the domain, and the entry's writer token is lowered to it if above. Returns the
    /// record it added to `fence_rebases` (see [`Rebaser::rebases`]).
    async fn rebase(&self, domain: &Domain, rebase: &Rebase) -> Result<RebaseRecord, FenceError> {
        let operation = Operation::Rebase;
        let sql_error = |e| map_error(e, domain, operation, false);
        let (mut tx, locked) = self.lock(domain, operation, None).await?;
        // A refusal ends the transaction: nothing changes.
        let to = match rebase.decide(domain, locked.hwm, IssuerView::IssuedUpTo(locked.issued)) {
            Ok(to) => to,
            Err(refused) => {
                release(tx).await;
                return Err(refused);
            }
        };
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
        let rows = sqlx::query(&format!(
            "SELECT from_mark, to_mark, operator, reason, \
             TIMESTAMPDIFF(MICROSECOND, '1970-01-01', at) DIV 1000 \
             FROM {} WHERE domain = ? ORDER BY seq",
            self.tables().rebases()
        ))
        .bind(domain.as_str().as_bytes())
        .fetch_all(self.pool())
        .await
        .map_err(|e| map_error(e, domain, Operation::Read, false))?;
        rows.iter()
            .map(|row| {
                let column = |e: sqlx::Error| corrupt(domain, format!("re-base record: {e}"));
                let from: u64 = row.try_get(0).map_err(column)?;
                let to: u64 = row.try_get(1).map_err(column)?;
                let operator: Vec<u8> = row.try_get(2).map_err(column)?;
                let reason: Vec<u8> = row.try_get(3).map_err(column)?;
                let at: i64 = row.try_get(4).map_err(column)?;
                let from = token_column(domain, from, "re-base's previous mark")?;
                let to = token_column(domain, to, "re-base's new mark")?;
                let text = |bytes: Vec<u8>| {
                    String::from_utf8(bytes)
                        .map_err(|_| corrupt(domain, "re-base record: not UTF-8"))
                };
                let (operator, reason) = (text(operator)?, text(reason)?);
                let record = OwnerId::new(operator)
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
