//! The seeds' per-row form: a token column beside your data, on your own table, checked by
//! the `UPDATE` itself, with the affected-row count mapped to `Fenced`.

use crate::dialect::PostgresDialect;

/// Fenced updates of single rows of your table, each row its own domain
/// (`<schema>.<table>/<key>`): fence-sql's, for PostgreSQL.
/// `RowFence::new(schema, table, key_column, token_column)`.
///
/// The update is the seed's statement,
/// `UPDATE accounts SET …, fence_token = $t WHERE id = $k AND (fence_token IS NULL OR fence_token <= $t)`
/// (`<` under [`fence_core::EqualTokenPolicy::Strict`]): the row is its own mark, no Fence table is
/// involved, and a row whose token column is NULL has accepted no token yet. The token column
/// holds u64 tokens exactly as `numeric(20,0)`; a `bigint` column works up to 2^63 − 1.
///
/// Zero rows updated becomes [`fence_core::FenceError::Fenced`] with the row's current token, a
/// `NotFound` backend error when the row does not exist, or a retryable `Contention` error
/// when the row admits the token by the time it is read (it was inserted or changed
/// meanwhile). Run it inside your own transaction (any `&mut PgConnection`, a `Transaction`
/// included) to combine it with other statements.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use fence_core::FencingToken;
/// let accounts = fence_postgres::RowFence::new("public", "accounts", "id", "fence_token")?;
/// let mut conn = pool.acquire().await?;
/// accounts
///     .update(&mut conn, 7_i64, FencingToken::new(12)?, |set| {
///         set.push("balance = ").push_bind(90_i64);
///     })
///     .await?;
/// # Ok(()) }
/// ```
pub type RowFence = fence_sql::RowFence<PostgresDialect>;
