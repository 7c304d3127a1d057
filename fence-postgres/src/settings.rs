//! The schema's own admission settings (`fence_settings`): bounds every client of the schema
//! obeys, whatever it was built with.

use fence_core::{BoundsConfig, FenceError};

use crate::schema::{require_shape, shape_error, sql_error};
use crate::PostgresFence;

impl PostgresFence {
    /// Stores `bounds` in the schema, replacing what was stored: from the next statement on,
    /// every write, claim and fenced transaction of every client of the schema — including
    /// one built without [`PostgresFence::with_max_token_step`] or
    /// [`PostgresFence::issued_only`] — refuses what they refuse, in the same statement or
    /// transaction that locks the domain's mark row. A client's own settings still apply: the
    /// tighter of the two wins. [`BoundsConfig::NONE`] removes the schema's setting.
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
            .execute(self.pool())
            .await
            .map_err(sql_error)?;
        Ok(())
    }

    /// The settings stored in the schema ([`BoundsConfig::NONE`] when none are).
    pub async fn resource_bounds(&self) -> Result<BoundsConfig, FenceError> {
        require_shape(self.pool(), self.tables()).await?;
        let row: Option<(Option<String>, bool)> = sqlx::query_as(&format!(
            "SELECT max_step::text, issued_only FROM {}",
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
                step.parse().map_err(|e| {
                    shape_error(format!(
                        "{}: max_step `{step}`: {e}",
                        self.tables().settings()
                    ))
                })
            })
            .transpose()?;
        Ok(BoundsConfig::new(step, issued_only))
    }
}
