//! The seeds' per-row form: a token column beside your data, on your own table, checked by
//! the `UPDATE` itself, with the matched-row count mapped to `Fenced`.

use std::fmt::Display;

use fence_core::raw::{observe, RowTarget};
use fence_core::{
    BackendErrorKind, Domain, EqualTokenPolicy, FenceError, FencingToken, InvalidInput, Operation,
};
use sqlx::mysql::MySql;
use sqlx::{Encode, MySqlConnection, QueryBuilder, Type};

use crate::error::{corrupt, user_sql_error, MySqlFenceError, BACKEND};
use crate::mark::token_column;

/// Fenced updates of single rows of your table, each row its own domain (`<db>.<table>/<key>`).
///
/// The update is the seed's statement,
/// `UPDATE accounts SET …, fence_token = ? WHERE id = ? AND (fence_token IS NULL OR fence_token <= ?)`
/// (`<` under [`EqualTokenPolicy::Strict`]): the row is its own mark, no Fence table is
/// involved, and a row whose token column is NULL has accepted no token yet. Make the token
/// column `BIGINT UNSIGNED` (every u64 token, exactly).
///
/// **The affected-rows trap**: MySQL reports *changed* rows unless the client asked for
/// matched rows (`CLIENT_FOUND_ROWS`), so an update that writes the values a row already has
/// would report 0 and look refused. sqlx connects with `CLIENT_FOUND_ROWS` (this crate's tests
/// check it), so 0 means no row matched, and is never reported as a success.
///
/// Zero rows matched becomes [`FenceError::Fenced`] with the row's current token, a
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
#[derive(Clone, Debug)]
pub struct RowFence {
    target: RowTarget,
}

impl RowFence {
    /// Fences rows of `database.table`, found by `key_column`, with their token in
    /// `token_column` (all plain identifiers: `[a-z_][a-z0-9_]*`).
    pub fn new(
        database: &str,
        table: &str,
        key_column: &str,
        token_column: &str,
    ) -> Result<Self, InvalidInput> {
        Ok(RowFence {
            target: RowTarget::new("database name", database, table, key_column, token_column)?,
        })
    }

    /// The equal-token policy (same owner by default).
    pub fn with_policy(mut self, policy: EqualTokenPolicy) -> Self {
        self.target = self.target.with_policy(policy);
        self
    }

    /// The domain of the row with `key`, as errors name it: `<database>.<table>/<key>`, or the
    /// table alone when that is not a valid domain (a key too long, or with control characters).
    pub fn domain(&self, key: impl Display) -> Domain {
        self.target.domain(key)
    }

    /// Updates the row with `key` under `token`: `set` appends the `SET` list's assignments
    /// (`set.push("balance = ").push_bind(90)`), the token column and the condition are added
    /// here. `Ok` means exactly this row matched and was updated (perhaps to the values it
    /// had). Counted as a `write` of the row's domain in the `mysql` backend's metrics.
    pub async fn update<'a, K>(
        &self,
        conn: &mut MySqlConnection,
        key: K,
        token: FencingToken,
        set: impl FnOnce(&mut QueryBuilder<'a, MySql>),
    ) -> Result<(), FenceError>
    where
        K: Display + Clone + Send + Encode<'a, MySql> + Type<MySql> + 'a,
    {
        let domain = self.domain(&key);
        let domain = &domain;
        observe(BACKEND, Operation::Write, domain, Some(token), async move {
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
                .push_bind(token.get())
                .push(format!(" WHERE {} = ", self.target.key_column()))
                .push_bind(key.clone())
                // A token of 0 is not Fence's: the row is refused and reported corrupt.
                .push(format!(
                    " AND ({0} IS NULL OR ({0} >= 1 AND {0} {compare} ",
                    self.target.token_column()
                ))
                .push_bind(token.get())
                .push("))");
            let matched = query
                .build()
                .execute(&mut *conn)
                .await
                // Outside a transaction the update commits by itself: a lost answer may hide it.
                .map_err(|e| user_sql_error(e, domain, Operation::Write, true))?
                .rows_affected();
            match matched {
                1 => Ok(()),
                0 => Err(self.zero_rows(conn, domain, key, token).await),
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

    /// Zero rows matched: why, from the row's current token, read with a locking read (the
    /// latest committed one, whatever the isolation level).
    async fn zero_rows<'a, K>(
        &self,
        conn: &mut MySqlConnection,
        domain: &Domain,
        key: K,
        token: FencingToken,
    ) -> FenceError
    where
        K: Send + Encode<'a, MySql> + Type<MySql> + 'a,
    {
        let mut query = QueryBuilder::new(format!(
            "SELECT {} FROM {} WHERE {} = ",
            self.target.token_column(),
            self.target.table(),
            self.target.key_column()
        ));
        query.push_bind(key).push(" LOCK IN SHARE MODE");
        let current: Result<Option<Option<u64>>, _> =
            query.build_query_scalar().fetch_optional(&mut *conn).await;
        let current = match current {
            Err(e) => return user_sql_error(e, domain, Operation::Write, false),
            Ok(None) => {
                return FenceError::backend(
                    BACKEND,
                    BackendErrorKind::NotFound,
                    Some(domain),
                    MySqlFenceError::RowMissing {
                        table: self.target.table().to_owned(),
                    },
                )
            }
            Ok(Some(current)) => match current
                .map(|c| token_column(domain, c, "token column"))
                .transpose()
            {
                Ok(current) => current,
                Err(corrupt) => return corrupt,
            },
        };
        match zero_rows_verdict(self.target.policy(), current, token) {
            ZeroRows::Fenced(current) => FenceError::Fenced {
                domain: domain.clone(),
                presented: token,
                current,
            },
            ZeroRows::Changed => FenceError::backend(
                BACKEND,
                BackendErrorKind::Contention,
                Some(domain),
                MySqlFenceError::RowChanged {
                    table: self.target.table().to_owned(),
                },
            ),
        }
    }
}

/// What zero matched rows mean, given the row's token read after the update.
#[derive(Debug, PartialEq, Eq)]
enum ZeroRows {
    /// The row's token refuses the presented one.
    Fenced(FencingToken),
    /// The row's token admits the presented one now: it was inserted or changed after the
    /// update looked (sqlx counts matched rows, so zero means no match).
    Changed,
}

fn zero_rows_verdict(
    policy: EqualTokenPolicy,
    current: Option<FencingToken>,
    token: FencingToken,
) -> ZeroRows {
    let admits = current.is_none_or(|current| match policy {
        EqualTokenPolicy::Strict => current < token,
        _ => current <= token,
    });
    match current {
        Some(current) if !admits => ZeroRows::Fenced(current),
        _ => ZeroRows::Changed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    #[test]
    fn zero_matched_rows_are_fenced_or_a_row_that_changed() {
        let same = EqualTokenPolicy::SameOwner;
        assert_eq!(
            zero_rows_verdict(same, Some(t(6)), t(5)),
            ZeroRows::Fenced(t(6))
        );
        // Never a success: zero matched rows wrote nothing.
        assert_eq!(zero_rows_verdict(same, Some(t(5)), t(5)), ZeroRows::Changed);
        assert_eq!(zero_rows_verdict(same, Some(t(4)), t(5)), ZeroRows::Changed);
        assert_eq!(zero_rows_verdict(same, None, t(5)), ZeroRows::Changed);
        let strict = EqualTokenPolicy::Strict;
        assert_eq!(
            zero_rows_verdict(strict, Some(t(5)), t(5)),
            ZeroRows::Fenced(t(5))
        );
    }
}
