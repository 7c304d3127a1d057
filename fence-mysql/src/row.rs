//! The seeds' per-row form: a token column beside your data, on your own table, checked by
//! the `UPDATE` itself, with the matched-row count mapped to `Fenced`.

use crate::dialect::MySqlDialect;

/// Fenced updates of single rows of your table, each row its own domain (`<db>.<table>/<key>`):
/// fence-sql's, for MySQL. `RowFence::new(database, table, key_column, token_column)`.
///
/// The update is the seed's statement,
/// `UPDATE accounts SET …, fence_token = ? WHERE id = ? AND (fence_token IS NULL OR fence_token <= ?)`
/// (`<` under [`fence_core::EqualTokenPolicy::Strict`]): the row is its own mark, no Fence table is
/// involved, and a row whose token column is NULL has accepted no token yet. Make the token
/// column `BIGINT UNSIGNED` (every u64 token, exactly).
///
/// **The affected-rows trap**: MySQL reports *changed* rows unless the client asked for
/// matched rows (`CLIENT_FOUND_ROWS`), so an update that writes the values a row already has
/// would report 0 and look refused. sqlx connects with `CLIENT_FOUND_ROWS` (this crate's tests
/// check it), so 0 means no row matched, and is never reported as a success.
///
/// Zero rows matched becomes [`fence_core::FenceError::Fenced`] with the row's current token, a
/// `NotFound` backend error when the row does not exist, or a retryable `Contention` error
/// when the row admits the token by the time it is read (it was inserted or changed
/// meanwhile). A connection lost during the update is `Ambiguous`: outside a transaction the
/// update commits by itself. Run it inside your own transaction
/// (any `&mut MySqlConnection`, a `Transaction` included) to combine it with other statements.
///
/// ```no_run
/// # async fn run(pool: sqlx::MySqlPool) -> Result<(), Box<dyn std::error::Error>> {
/// use fence_core::FencingToken;
/// let accounts = fence_mysql::RowFence::new("shop", "accounts", "id", "fence_token")?;
/// let mut conn = pool.acquire().await?;
/// accounts
///     .update(&mut conn, 7_i64, FencingToken::new(12)?, |set| {
///         set.push("balance = ").push_bind(90_i64);
///     })
///     .await?;
/// # Ok(()) }
/// ```
pub type RowFence = fence_sql::RowFence<MySqlDialect>;
