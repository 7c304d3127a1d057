//! The seeds' per-row form: a token column beside your data, on your own table, checked by
//! the `UPDATE` itself, with the affected-row count mapped to `Fenced`.

use std::fmt::Display;

use fence_core::raw::{observe, RowTarget};
use fence_core::{
    BackendErrorKind, Domain, EqualTokenPolicy, FenceError, FencingToken, InvalidInput, Operation,
};
use sqlx::postgres::Postgres;
use sqlx::{Encode, PgConnection, QueryBuilder, Type};

use crate::error::{corrupt, token_column, user_sql_error, PostgresFenceError, BACKEND};

/// Fenced updates of single rows of your table, each row its own domain (`<table>/<key>`).
///
/// The update is the seed's statement,
/// `UPDATE accounts SET …, fence_token = $t WHERE id = $k AND (fence_token IS NULL OR fence_token <= $t)`
/// (`<` under [`EqualTokenPolicy::Strict`]): the row is its own mark, no Fence table is
/// involved, and a row whose token column is NULL has accepted no token yet. The token column
/// holds u64 tokens exactly as `numeric(20,0)`; a `bigint` column works up to 2^63 − 1.
///
/// Zero rows updated becomes [`FenceError::Fenced`] with the row's current token, or a
/// `NotFound` backend error when the row does not exist. Run it inside your own transaction
/// (any `&mut PgConnection`, a `Transaction` included) to combine it with other statements.
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
#[derive(Clone, Debug)]
pub struct RowFence {
    target: RowTarget,
}

impl RowFence {
    /// Fences rows of `schema.table`, found by `key_column`, with their token in `token_column`
    /// (all plain identifiers: `[a-z_][a-z0-9_]*`).
    pub fn new(
        schema: &str,
        table: &str,
        key_column: &str,
        token_column: &str,
    ) -> Result<Self, fence_core::InvalidInput> {
        Ok(RowFence {
            target: RowTarget::new("schema name", schema, table, key_column, token_column)?,
        })
    }

    /// The equal-token policy (same owner by default).
    pub fn with_policy(mut self, policy: EqualTokenPolicy) -> Self {
        self.target = self.target.with_policy(policy);
        self
    }

    /// The domain of the row with `key`, as errors name it: `<schema>.<table>/<key>`, or the
    /// table alone when that is not a valid domain (a key too long, or with control characters).
    pub fn domain(&self, key: impl Display) -> Domain {
        self.target.domain(key)
    }

    /// Updates the row with `key` under `token`: `set` appends the `SET` list's assignments
    /// (`set.push("balance = ").push_bind(90)`), the token column and the condition are added
    /// here. `Ok` means exactly this row was updated. Counted as a `write` of the row's
    /// domain in the `postgres` backend's metrics.
    pub async fn update<'a, K>(
        &self,
        conn: &mut PgConnection,
        key: K,
        token: FencingToken,
        set: impl FnOnce(&mut QueryBuilder<'a, Postgres>),
    ) -> Result<(), FenceError>
    where
        K: Display + Clone + Send + Encode<'a, Postgres> + Type<Postgres> + 'a,
    {
        let domain = self.domain(&key);
        let domain = &domain;
        observe(BACKEND, Operation::Write, domain, Some(token), async move {
            let operation = Operation::Write;
            let compare = self.target.comparison();
            let head = format!("UPDATE {} SET ", self.target.table());
            let mut query = QueryBuilder::new(&head);
            set(&mut query);
            if query.sql().len() == head.len() {
                return Err(InvalidInput::Configuration(format!(
                    "a fenced update of `{domain}` needs at least one assignment in its SET list"
                ))
                .into());
            }
            query
                .push(format!(", {} = ", self.target.token_column()))
                .push_bind(token.to_string())
                .push(format!("::numeric WHERE {} = ", self.target.key_column()))
                .push_bind(key.clone())
                // A negative token is not Fence's: the row is refused and reported corrupt.
                .push(format!(
                    " AND ({0} IS NULL OR ({0} >= 0 AND {0} {compare} ",
                    self.target.token_column()
                ))
                .push_bind(token.to_string())
                .push("::numeric))");
            let updated = query
                .build()
                .execute(&mut *conn)
                .await
                // Outside a transaction the update commits by itself: a lost answer may hide it.
                .map_err(|e| user_sql_error(e, domain, operation, true))?
                .rows_affected();
            match updated {
                1 => Ok(()),
                0 => Err(self.refusal(conn, domain, key, token).await),
                n => Err(corrupt(
                    domain,
                    format!(
                        "{n} rows have this key in {}: the key column is not unique",
                        self.target.table()
                    ),
                )),
            }
        })
        .await
    }

    /// Why zero rows were updated: the row's current token (`Fenced`), or no such row.
    async fn refusal<'a, K>(
        &self,
        conn: &mut PgConnection,
        domain: &Domain,
        key: K,
        token: FencingToken,
    ) -> FenceError
    where
        K: Send + Encode<'a, Postgres> + Type<Postgres> + 'a,
    {
        let mut query = QueryBuilder::new(format!(
            "SELECT {}::text FROM {} WHERE {} = ",
            self.target.token_column(),
            self.target.table(),
            self.target.key_column()
        ));
        query.push_bind(key);
        let current: Result<Option<Option<String>>, sqlx::Error> =
            query.build_query_scalar().fetch_optional(&mut *conn).await;
        match current {
            Err(e) => user_sql_error(e, domain, Operation::Write, false),
            Ok(Some(Some(text))) => match token_column(domain, &text, "token column") {
                Ok(current) => FenceError::Fenced {
                    domain: domain.clone(),
                    presented: token,
                    current,
                },
                Err(corrupt) => corrupt,
            },
            // Missing at the update (a row created since is not this update's business).
            Ok(_) => FenceError::backend(
                BACKEND,
                BackendErrorKind::NotFound,
                Some(domain),
                PostgresFenceError::RowMissing {
                    table: self.target.table().to_owned(),
                },
            ),
        }
    }
}
