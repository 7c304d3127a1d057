//! The database's own admission settings (`fence_settings`): bounds every client of the
//! database obeys, whatever it was built with.

use std::time::Duration;

use fence_core::{BoundsConfig, FenceError};
use sqlx::{Connection, Executor};

use crate::schema::{require_shape, sql_error};
use crate::MySqlFence;

/// How long [`MySqlFence::set_resource_bounds`] waits for fenced operations in flight.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

impl MySqlFence {
    /// Stores `bounds` in the database, replacing what was stored: from then on every write,
    /// claim and fenced transaction of every client of the database — including one built
    /// without [`crate::MySqlFenceBuilder::max_token_step`] or
    /// [`crate::MySqlFenceBuilder::issued_only`] — refuses what they refuse, in the transaction
    /// that locks the domain's mark row. A client's own settings still apply: the tighter of
    /// the two wins. [`BoundsConfig::NONE`] removes the database's setting.
    ///
    /// It waits for the fenced operations in flight (up to 10 s, then a retryable error): the
    /// change is made under `LOCK TABLES … fence_marks READ, fence_settings WRITE`, which waits
    /// for every transaction that holds a mark row or has read the settings (each fenced
    /// operation reads them in its transaction, holding their metadata lock until it ends) and
    /// holds new ones off until the change commits, so once this returns none decided under the
    /// old settings can still change a mark. Reads of the marks are not blocked. Needs the
    /// `LOCK TABLES` privilege (an operator's). Runs on a connection of its own, closed
    /// afterwards. An error once its `COMMIT` was sent may hide a stored change: calling it
    /// again with the same bounds is safe.
    ///
    /// ```no_run
    /// # async fn run(fence: fence_mysql::MySqlFence) -> Result<(), fence_core::FenceError> {
    /// use std::num::NonZeroU64;
    /// use fence_core::BoundsConfig;
    /// fence.set_resource_bounds(BoundsConfig::new(NonZeroU64::new(10_000), true)).await?;
    /// assert!(fence.resource_bounds().await?.issued_only);
    /// # Ok(()) }
    /// ```
    pub async fn set_resource_bounds(&self, bounds: BoundsConfig) -> Result<(), FenceError> {
        require_shape(self.pool(), self.tables()).await?;
        // Detached: a session with table locks and autocommit off never goes back to the pool
        // (dropped on an error, the connection is closed and the server releases its locks).
        let mut conn = self.pool().acquire().await.map_err(sql_error)?.detach();
        let wait = BARRIER_TIMEOUT.as_secs();
        let (marks, settings) = (self.tables().marks(), self.tables().settings());
        for statement in [
            format!("SET SESSION lock_wait_timeout = {wait}, innodb_lock_wait_timeout = {wait}"),
            "SET autocommit = 0".to_owned(),
            format!("LOCK TABLES {marks} READ, {settings} WRITE"),
        ] {
            conn.execute(statement.as_str()).await.map_err(sql_error)?;
        }
        let step = bounds.max_step.map(std::num::NonZeroU64::get);
        let updated = sqlx::query(&format!(
            "UPDATE {settings} SET max_step = ?, issued_only = ? WHERE one = 1"
        ))
        .bind(step)
        .bind(u8::from(bounds.issued_only))
        .execute(&mut conn)
        .await
        .map_err(sql_error)?
        .rows_affected();
        if updated != 1 {
            return Err(crate::schema::shape_error(format!(
                "{settings} has no row: run fence_mysql::migrate"
            )));
        }
        for statement in ["COMMIT", "UNLOCK TABLES"] {
            conn.execute(statement).await.map_err(sql_error)?;
        }
        conn.close().await.map_err(sql_error)
    }

    /// The settings stored in the database ([`BoundsConfig::NONE`] when none are).
    pub async fn resource_bounds(&self) -> Result<BoundsConfig, FenceError> {
        require_shape(self.pool(), self.tables()).await?;
        let settings = self.tables().settings();
        let row: Option<(Option<u64>, u8)> = sqlx::query_as(&format!(
            "SELECT max_step, issued_only FROM {settings} WHERE one = 1"
        ))
        .fetch_optional(self.pool())
        .await
        .map_err(sql_error)?;
        let Some((step, issued_only)) = row else {
            return Err(crate::schema::shape_error(format!(
                "{settings} has no row: run fence_mysql::migrate"
            )));
        };
        let step = match step {
            None => None,
            Some(step) => Some(std::num::NonZeroU64::new(step).ok_or_else(|| {
                crate::schema::shape_error(format!("{settings}: a step bound of 0"))
            })?),
        };
        Ok(BoundsConfig::new(step, issued_only != 0))
    }
}
