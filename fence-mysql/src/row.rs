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
/// reports 0 and would look refused. sqlx connects with `CLIENT_FOUND_ROWS`, and when 0 rows
/// are reported this fence reads the row's token anyway: a token the update's condition
/// admits means the row matched and the update is a success, whatever the count said.
///
/// Zero rows matched becomes [`FenceError::Fenced`] with the row's current token, or a
/// `NotFound` backend error when the row does not exist. Run it inside your own transaction
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
                .map_err(|e| user_sql_error(e, domain, Operation::Write, false))?
                .rows_affected();
            match matched {
                1 => Ok(()),
                0 => self.zero_rows(conn, domain, key, token).await,
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

    /// Zero rows reported: the row's current token, read with a locking read (the latest
    /// committed one, whatever the isolation level). The presented token itself, admitted —
    /// the update matched a row it left as it was, counted as changed rows — is a success;
    /// a newer one is `Fenced`; no row is `NotFound`.
    async fn zero_rows<'a, K>(
        &self,
        conn: &mut MySqlConnection,
        domain: &Domain,
        key: K,
        token: FencingToken,
    ) -> Result<(), FenceError>
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
        let current: Option<Option<u64>> = query
            .build_query_scalar()
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| user_sql_error(e, domain, Operation::Write, false))?;
        let current = match current {
            None => {
                return Err(FenceError::backend(
                    BACKEND,
                    BackendErrorKind::NotFound,
                    Some(domain),
                    MySqlFenceError::RowMissing {
                        table: self.target.table().to_owned(),
                    },
                ))
            }
            Some(current) => current
                .map(|c| token_column(domain, c, "token column"))
                .transpose()?,
        };
        match zero_rows_verdict(self.target.policy(), current, token) {
            ZeroRows::Matched => Ok(()),
            ZeroRows::Fenced(current) => Err(FenceError::Fenced {
                domain: domain.clone(),
                presented: token,
                current,
            }),
            ZeroRows::Contradiction(why) => Err(corrupt(domain, why)),
        }
    }
}

/// What zero reported rows mean, given the row's token read after the update.
#[derive(Debug, PartialEq, Eq)]
enum ZeroRows {
    /// The update matched a row it left as it was (the count was of changed rows).
    Matched,
    /// The row's token refuses the presented one.
    Fenced(FencingToken),
    /// The row's token admits the presented one, yet the update matched nothing.
    Contradiction(String),
}

fn zero_rows_verdict(
    policy: EqualTokenPolicy,
    current: Option<FencingToken>,
    token: FencingToken,
) -> ZeroRows {
    let Some(current) = current else {
        // The update would have set the token: it did not match this row.
        return ZeroRows::Contradiction(
            "the row's token is NULL, yet the update matched nothing".into(),
        );
    };
    let admits = match policy {
        EqualTokenPolicy::Strict => current < token,
        _ => current <= token,
    };
    match (admits, current == token) {
        // The trap: the values and the token were already these, counted as unchanged.
        (true, true) => ZeroRows::Matched,
        (true, false) => ZeroRows::Contradiction(format!(
            "the row's token {current} admits {token}, yet the update matched nothing"
        )),
        (false, _) => ZeroRows::Fenced(current),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap_or(FencingToken::MAX)
    }

    #[test]
    fn zero_changed_rows_under_the_same_token_is_a_match() {
        let same = EqualTokenPolicy::SameOwner;
        assert_eq!(zero_rows_verdict(same, Some(t(5)), t(5)), ZeroRows::Matched);
        assert_eq!(
            zero_rows_verdict(same, Some(t(6)), t(5)),
            ZeroRows::Fenced(t(6))
        );
        assert!(matches!(
            zero_rows_verdict(same, Some(t(4)), t(5)),
            ZeroRows::Contradiction(_)
        ));
        assert!(matches!(
            zero_rows_verdict(same, None, t(5)),
            ZeroRows::Contradiction(_)
        ));
        let strict = EqualTokenPolicy::Strict;
        assert_eq!(
            zero_rows_verdict(strict, Some(t(5)), t(5)),
            ZeroRows::Fenced(t(5))
        );
    }
}
