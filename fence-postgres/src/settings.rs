//! The schema's own admission settings (`fence_settings`): bounds every client of the schema
//! obeys, whatever it was built with.

use std::time::Duration;

use fence_core::{BoundsConfig, FenceError};

use crate::mark::parse_step;
use crate::schema::{require_shape, shape_error, sql_error};
use crate::PostgresFence;

/// How long [`PostgresFence::set_resource_bounds`] waits for fenced operations in flight.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);

impl PostgresFence {
    /// Stores `bounds` in the schema, replacing what was stored: from the next statement on,
    /// every write, claim and fenced transaction of every client of the schema — including
    /// one built without [`crate::PostgresFenceBuilder::max_token_step`] or
    /// [`crate::PostgresFenceBuilder::issued_only`] — refuses what they refuse, in the same
    /// statement or transaction that locks the domain's mark row. A client's own settings still apply: the
    /// tighter of the two wins. [`BoundsConfig::NONE`] removes the schema's setting.
    ///
    /// It waits for the fenced operations in flight (up to 10 s, then a retryable error):
    /// once it returns, none decided under the old settings can still change a mark. Clients
    /// of fence-postgres versions before these settings ignore them: upgrade every client of
    /// the schema first.
    ///
    /// ```no_run
    /// # async fn run(fence: fence_postgres::PostgresFence) -> Result<(), fence_core::FenceError> {
    /// use std::num::NonZeroU64;
    /// use fence_core::BoundsConfig;
    /// fence.set_resource_bounds(BoundsConfig::new(NonZeroU64::new(10_000), true)).await?;
    /// assert!(fence.resource_bounds().await?.issued_only);
    /// # Ok(()) }
    /// ```
    pub async fn set_resource_bounds(&self, bounds: BoundsConfig) -> Result<(), FenceError> {
        require_shape(self.pool(), self.tables()).await?;
        let settings = self.tables().settings();
        let mut tx = self.pool().begin().await.map_err(sql_error)?;
        // A barrier: EXCLUSIVE waits for every transaction holding a mark row (a claim, a
        // fenced transaction or a write admitted under the old settings) and holds new ones
        // off until the change commits, so once this returns nothing decided under the old
        // settings can still change a mark. Reads are not blocked.
        sqlx::query("SELECT set_config('lock_timeout', $1, true)")
            .bind(format!("{}ms", BARRIER_TIMEOUT.as_millis()))
            .execute(&mut *tx)
            .await
            .map_err(sql_error)?;
        sqlx::query(&format!(
            "LOCK TABLE {} IN EXCLUSIVE MODE",
            self.tables().marks()
        ))
        .execute(&mut *tx)
        .await
        .map_err(sql_error)?;
        let sql = if bounds == BoundsConfig::NONE {
            format!("DELETE FROM {settings}")
        } else {
            format!(
                "INSERT INTO {settings} (one, max_step, issued_only) \
                 VALUES (true, $1::numeric, $2) ON CONFLICT (one) \
                 DO UPDATE SET max_step = EXCLUDED.max_step, issued_only = EXCLUDED.issued_only"
            )
        };
        sqlx::query(&sql)
            .bind(bounds.max_step.map(|step| step.to_string()))
            .bind(bounds.issued_only)
            .execute(&mut *tx)
            .await
            .map_err(sql_error)?;
        tx.commit().await.map_err(sql_error)
    }

    /// The settings stored in the schema ([`BoundsConfig::NONE`] when none are).
    pub async fn resource_bounds(&self) -> Result<BoundsConfig, FenceError> {
        require_shape(self.pool(), self.tables()).await?;
        let row: Option<(Option<String>, bool)> = sqlx::query_as(&format!(
            "SELECT max_step::text, issued_only FROM {} WHERE one",
            self.tables().settings()
        ))
        .fetch_optional(self.pool())
        .await
        .map_err(sql_error)?;
        let Some((step, issued_only)) = row else {
            return Ok(BoundsConfig::NONE);
        };
        let step = step
            .map(|step| {
                parse_step(&step)
                    .map_err(|why| shape_error(format!("{}: {why}", self.tables().settings())))
            })
            .transpose()?;
        Ok(BoundsConfig::new(step, issued_only))
    }
}
