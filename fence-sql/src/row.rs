//! The seeds' per-row form: a token column beside your data, on your own table, checked by
//! the `UPDATE` itself, with the matched-row count mapped to `Fenced`.

use std::fmt::{self, Display};
use std::marker::PhantomData;

use fence_core::raw::{observe, RowTarget};
use fence_core::{
    BackendErrorKind, Domain, EqualTokenPolicy, FenceError, FencingToken, InvalidInput, Operation,
};
use sqlx::{ColumnIndex, Database, Encode, Executor, IntoArguments, QueryBuilder, Type};

use crate::{corrupt, user_sql_error, Dialect};

/// Fenced updates of single rows of your table, each row its own domain
/// (`<namespace>.<table>/<key>`).
///
/// The update is the seed's statement,
/// `UPDATE accounts SET …, fence_token = t WHERE id = k AND (fence_token IS NULL OR fence_token <= t)`
/// (`<` under [`EqualTokenPolicy::Strict`]): the row is its own mark, no Fence table is
/// involved, and a row whose token column is NULL has accepted no token yet (0 too where the
/// dialect says so: [`Dialect::ROW_ZERO_IS_UNSET`]). A column holding no token of Fence's
/// (negative, or 0 elsewhere) is refused and reported corrupt.
///
/// Zero rows matched becomes [`FenceError::Fenced`] with the row's current token, a
/// `NotFound` backend error when the row does not exist, or a retryable `Contention` error
/// when the row admits the token by the time it is read (it was inserted or changed
/// meanwhile): never a success. A connection lost during the update is `Ambiguous`: outside a
/// transaction the update commits by itself. Run it inside your own transaction (any
/// connection of the database, a `Transaction` included) to combine it with other statements.
///
/// Each adapter names it for its database (`fence_postgres::RowFence`, `fence_mysql::RowFence`)
/// and says there which column type holds every token.
pub struct RowFence<D: Dialect> {
    target: RowTarget,
    dialect: PhantomData<fn() -> D>,
}

impl<D: Dialect> RowFence<D> {
    /// Fences rows of `namespace.table` (the schema or database), found by `key_column`, with
    /// their token in `token_column` (all plain identifiers: `[a-z_][a-z0-9_]*`).
    pub fn new(
        namespace: &str,
        table: &str,
        key_column: &str,
        token_column: &str,
    ) -> Result<Self, InvalidInput> {
        Ok(RowFence {
            target: RowTarget::new(D::NAMESPACE, namespace, table, key_column, token_column)?,
            dialect: PhantomData,
        })
    }

    /// The equal-token policy (same owner by default).
    pub fn with_policy(mut self, policy: EqualTokenPolicy) -> Self {
        self.target = self.target.with_policy(policy);
        self
    }

    /// The domain of the row with `key`, as errors name it: `<namespace>.<table>/<key>`, or the
    /// table alone when that is not a valid domain (a key too long, or with control characters).
    pub fn domain(&self, key: impl Display) -> Domain {
        self.target.domain(key)
    }

    /// Updates the row with `key` under `token`: `set` appends the `SET` list's assignments
    /// (`set.push("balance = ").push_bind(90)`), the token column and the condition are added
    /// here. `Ok` means exactly this row matched and was updated (perhaps to the values it
    /// had). Counted as a `write` of the row's domain in the backend's metrics.
    pub async fn update<'a, K>(
        &self,
        conn: &mut <D::Db as Database>::Connection,
        key: K,
        token: FencingToken,
        set: impl FnOnce(&mut QueryBuilder<'a, D::Db>),
    ) -> Result<(), FenceError>
    where
        K: Display + Clone + Send + Encode<'a, D::Db> + Type<D::Db> + 'a,
        for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
        for<'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
        usize: ColumnIndex<<D::Db as Database>::Row>,
    {
        let domain = self.domain(&key);
        let domain = &domain;
        observe(
            D::BACKEND,
            Operation::Write,
            domain,
            Some(token),
            async move {
                let column = self.target.token_column();
                let head = format!("UPDATE {} SET ", self.target.table());
                let mut query = QueryBuilder::new(&head);
                set(&mut query);
                if query.sql().len() == head.len() {
                    return Err(InvalidInput::Configuration(format!(
                    "a fenced update of `{domain}` needs at least one assignment in its SET list"
                ))
                    .into());
                }
                query.push(format!(", {column} = "));
                D::push_token(&mut query, token);
                query
                    .push(format!(" WHERE {} = ", self.target.key_column()))
                    .push_bind(key.clone())
                    // A token below the floor is not Fence's: the row is refused, reported corrupt.
                    .push(format!(
                        " AND ({column} IS NULL OR ({column} >= {} AND {column} {} ",
                        u8::from(!D::ROW_ZERO_IS_UNSET),
                        self.target.comparison()
                    ));
                D::push_token(&mut query, token);
                query.push("))");
                let result = query
                    .build()
                    .execute(&mut *conn)
                    .await
                    // Outside a transaction the update commits by itself: a lost answer may hide it.
                    .map_err(|e| user_sql_error::<D>(e, domain, Operation::Write, true))?;
                match D::rows_affected(&result) {
                    1 => Ok(()),
                    0 => Err(self.zero_rows(conn, domain, key, token).await),
                    n => Err(corrupt::<D>(
                        domain,
                        format!(
                            "{n} rows have this key in {}: the key column is not unique",
                            self.target.table()
                        ),
                    )),
                }
            },
        )
        .await
    }

    /// Zero rows matched: why, from the row's current token (the latest committed one).
    async fn zero_rows<'a, K>(
        &self,
        conn: &mut <D::Db as Database>::Connection,
        domain: &Domain,
        key: K,
        token: FencingToken,
    ) -> FenceError
    where
        K: Send + Encode<'a, D::Db> + Type<D::Db> + 'a,
        for<'c> &'c mut <D::Db as Database>::Connection: Executor<'c, Database = D::Db>,
        for<'q> <D::Db as Database>::Arguments<'a>: IntoArguments<'q, D::Db>,
        usize: ColumnIndex<<D::Db as Database>::Row>,
    {
        let mut query = QueryBuilder::new(format!(
            "SELECT {} FROM {} WHERE {} = ",
            D::token_select(self.target.token_column()),
            self.target.table(),
            self.target.key_column()
        ));
        query.push_bind(key).push(D::ROW_READ_SUFFIX);
        let current: Result<Option<Option<D::TokenValue>>, _> =
            query.build_query_scalar().fetch_optional(&mut *conn).await;
        let table = || self.target.table().to_owned();
        let current = match current {
            Err(e) => return user_sql_error::<D>(e, domain, Operation::Write, false),
            Ok(None) => {
                return FenceError::backend(
                    D::BACKEND,
                    BackendErrorKind::NotFound,
                    Some(domain),
                    D::row_missing(table()),
                )
            }
            Ok(Some(current)) => match current.map(|c| row_token::<D>(domain, c)).transpose() {
                Ok(current) => current.flatten(),
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
                D::BACKEND,
                BackendErrorKind::Contention,
                Some(domain),
                D::row_changed(table()),
            ),
        }
    }
}

impl<D: Dialect> Clone for RowFence<D> {
    fn clone(&self) -> Self {
        RowFence {
            target: self.target.clone(),
            dialect: PhantomData,
        }
    }
}

impl<D: Dialect> fmt::Debug for RowFence<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowFence")
            .field("backend", &D::BACKEND)
            .field("target", &self.target)
            .finish()
    }
}

/// A token column's value: `None` for 0 where the dialect lets 0 mean "no token yet", else
/// the token (`CorruptState` for anything that is not one).
fn row_token<D: Dialect>(
    domain: &Domain,
    value: D::TokenValue,
) -> Result<Option<FencingToken>, FenceError> {
    match D::number_of(domain, value, "token column")? {
        0 if D::ROW_ZERO_IS_UNSET => Ok(None),
        n => FencingToken::new(n)
            .map(Some)
            .map_err(|e| corrupt::<D>(domain, format!("token column {n}: {e}"))),
    }
}

/// What zero matched rows mean, given the row's token read after the update.
#[derive(Debug, PartialEq, Eq)]
enum ZeroRows {
    /// The row's token refuses the presented one.
    Fenced(FencingToken),
    /// The row's token admits the presented one now: it was inserted or changed after the
    /// update looked.
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
