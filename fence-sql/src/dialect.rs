//! What an SQL adapter tells the shared code about its database.

use async_trait::async_trait;
use fence_core::env::SqlPoolVariables;
use fence_core::raw::Shape;
use fence_core::{BackendErrorKind, Domain, FenceError, FencingToken};
use sqlx::{Database, Pool, QueryBuilder, Transaction};

use crate::{FenceCore, Tables};

/// What one database does differently: its error codes, how a token is bound and read, what a
/// fenced transaction runs just before `COMMIT`. Implemented once per adapter, on a type that
/// only names the database (fence-postgres's `PostgresDialect`, fence-mysql's `MySqlDialect`).
#[async_trait]
pub trait Dialect: Send + Sync + Sized + 'static {
    /// sqlx's database.
    type Db: Database;
    /// The adapter's error type, the source of the [`FenceError`]s it reports.
    type Error: std::error::Error + From<sqlx::Error> + Send + Sync + 'static;
    /// What a fenced transaction keeps for [`Dialect::commit_admitted`]. Constructible by the
    /// adapter alone (a private field): a [`crate::FencedTransaction`] is made only with one,
    /// so only the adapter's `begin` hands one out.
    type Pending: Send + Sync + 'static;
    /// How the database hands back a token column (read by [`Dialect::token_select`]).
    type TokenValue: for<'r> sqlx::Decode<'r, Self::Db> + sqlx::Type<Self::Db> + Send + Unpin;
    /// How the database hands back a text column of the fence's (owners, reasons).
    type TextValue: for<'r> sqlx::Decode<'r, Self::Db> + sqlx::Type<Self::Db> + Send + Unpin;

    /// The adapter's fence, made from the parts every SQL fence has.
    type Fence: From<FenceCore<Self>>;

    /// The backend's name in errors and metrics.
    const BACKEND: &'static str;
    /// The largest value a fence accepts unless its builder says otherwise.
    const DEFAULT_MAX_VALUE_BYTES: usize;
    /// The environment variables the adapter's `from_env` reads.
    const VARIABLES: SqlPoolVariables;
    /// What the namespace of a table is called, for errors (`schema name`, `database name`).
    const NAMESPACE: &'static str;
    /// What the per-row fence appends to its read of a refused row's token, to read the latest
    /// committed one (a locking read where plain reads see a snapshot).
    const ROW_READ_SUFFIX: &'static str;
    /// Whether a per-row token column holding 0 means "no token accepted yet", as NULL does
    /// (else 0 is no token of Fence's, and such a row is refused as corrupt).
    const ROW_ZERO_IS_UNSET: bool;
    /// The server's clock, as leases' expiry is compared with it.
    const NOW: &'static str;
    /// What the lease row's read in an acquisition ends with, under the counter row's lock:
    /// a locking read where it takes no lock beyond the row.
    const LEASE_READ_SUFFIX: &'static str;
    /// The longest lease the lease rows hold.
    const MAX_LEASE_TTL: std::time::Duration;

    /// The tables' shape as found in the database: `None` when every table has exactly the
    /// columns the adapter's migration gives it.
    async fn check_shape(
        pool: &Pool<Self::Db>,
        tables: &Tables<Self>,
    ) -> Result<Option<Shape>, sqlx::Error>;

    /// Checks, without writing, that the pool's user has every privilege `fence`, its issuer,
    /// its leases and a re-base need on its tables (the fence's `check_permissions`).
    async fn check_permissions(
        fence: &Self::Fence,
    ) -> Result<fence_core::permissions::PermissionReport, FenceError>;

    /// The error of tables the adapter's migration has not created (`table` is missing in
    /// `namespace`).
    fn not_migrated(namespace: String, table: &'static str) -> Self::Error;

    /// The error of tables or settings of another shape (`detail` says how), in a call that
    /// concerns no domain.
    fn shape(detail: String) -> Self::Error;

    /// The class of a sqlx error of this database.
    fn classify(error: &sqlx::Error) -> ErrorClass;

    /// The rows a statement matched (sqlx's query results share no trait for it).
    fn rows_affected(result: &<Self::Db as Database>::QueryResult) -> u64;

    /// Binds `domain` where a domain column's value goes (as the fence's tables store it).
    fn push_domain(query: &mut QueryBuilder<'_, Self::Db>, domain: &Domain);

    /// Binds `text` where a text column's value goes (owners, as the fence's tables store them).
    fn push_text(query: &mut QueryBuilder<'_, Self::Db>, text: &str);

    /// Appends the server's clock plus `ttl` (checked against [`Dialect::MAX_LEASE_TTL`]).
    fn push_expiry(query: &mut QueryBuilder<'_, Self::Db>, ttl: std::time::Duration);

    /// What follows an `INSERT` of a row keyed by `domain` so that an existing row is updated
    /// to the inserted `columns` instead (none: left as it is).
    fn upsert(columns: &[&str]) -> String;

    /// The select-list expression that reads the time from the server's clock to the time
    /// column `column`, in whole milliseconds (a 64-bit integer, negative once passed).
    fn remaining_ms(column: &str) -> String;

    /// A counter read from a token column (`what` names it; 0 allowed), or `CorruptState`.
    fn number_of(domain: &Domain, value: Self::TokenValue, what: &str) -> Result<u64, FenceError>;

    /// Tells waiters that `domain`'s lease was just released (on `conn`, the connection the
    /// release ran on), where the database can; the default does nothing (waiters poll).
    async fn notify_release(
        _conn: &mut <Self::Db as Database>::Connection,
        _core: &FenceCore<Self>,
        _domain: &Domain,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// Waits, after an acquisition found `domain`'s lease held, until it may be free or
    /// `within` has passed; the default polls (25 to 50 ms).
    async fn wait_for_release(
        _core: &FenceCore<Self>,
        _domain: &Domain,
        within: std::time::Duration,
    ) {
        fence_core::raw::poll_for_release(within).await;
    }

    /// Binds `token` where a token value goes in `query`, exactly (every u64).
    fn push_token(query: &mut QueryBuilder<'_, Self::Db>, token: FencingToken);

    /// The select-list expression that reads the token column `column` as a [`Self::TokenValue`].
    fn token_select(column: &str) -> String;

    /// A token read from a column (`what` names it), or `CorruptState` when it is not a token.
    fn token_of(
        domain: &Domain,
        value: Self::TokenValue,
        what: &str,
    ) -> Result<FencingToken, FenceError>;

    /// A remembered operation's kind, revision and previous mark in columns
    /// `first..first + 3` of `row` (`None` when the kind is NULL: nothing remembered).
    fn decode_op(
        domain: &Domain,
        row: &<Self::Db as Database>::Row,
        first: usize,
    ) -> Result<Option<fence_core::raw::StoredOp>, FenceError>;

    /// A text column's value (`what` names it), or `CorruptState` when it is not UTF-8.
    fn text_of(domain: &Domain, value: Self::TextValue, what: &str) -> Result<String, FenceError>;

    /// The select-list expression that reads the time column `column` as whole milliseconds
    /// since the Unix epoch (a 64-bit integer).
    fn epoch_ms(column: &str) -> String;

    /// The error of a per-row update that found no row with its key in `table`.
    fn row_missing(table: String) -> Self::Error;

    /// The error of a per-row update that matched no row although the row now admits its
    /// token: it was inserted or changed meanwhile (retryable).
    fn row_changed(table: String) -> Self::Error;

    /// Commits a fenced transaction with what [`Dialect::Pending`] kept: raises the mark, or
    /// checks that the transaction is still the one the fence began, then `COMMIT`. A
    /// transaction that cannot commit what the fence admitted is an error, never a success;
    /// a connection lost once `COMMIT` may have been sent is [`FenceError::Ambiguous`].
    async fn commit_admitted(
        pending: Self::Pending,
        tx: Transaction<'static, Self::Db>,
        domain: &Domain,
    ) -> Result<(), FenceError>;
}

/// What a sqlx error means to the fence, as a [`Dialect`] reads its codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErrorClass {
    /// Whether a retry can help.
    pub kind: BackendErrorKind,
    /// The connection was lost or the server is going away: a statement sent may have taken
    /// effect (a `COMMIT` whose answer was lost).
    pub lost: bool,
    /// A column missing or of another type: the fence's own tables have another shape.
    pub shape: bool,
}

impl ErrorClass {
    /// An error of `kind`, the connection kept and the tables as expected.
    pub fn new(kind: BackendErrorKind) -> Self {
        ErrorClass {
            kind,
            lost: false,
            shape: false,
        }
    }

    /// The connection was lost (or the server is going away).
    pub fn lost(mut self) -> Self {
        self.lost = true;
        self
    }

    /// The fence's tables have another shape.
    pub fn shape(mut self) -> Self {
        self.shape = true;
        self
    }

    /// The classes every driver shares, `None` for a database error (the dialect's to read):
    /// an I/O error loses the connection (retryable), a protocol error loses it too (not
    /// retryable: the driver and the server disagree), an exhausted or closed pool is
    /// unavailable.
    pub fn of_driver(error: &sqlx::Error) -> Option<Self> {
        match error {
            sqlx::Error::Database(_) => None,
            sqlx::Error::Io(_) => Some(ErrorClass::new(BackendErrorKind::Unavailable).lost()),
            sqlx::Error::Protocol(_) => Some(ErrorClass::new(BackendErrorKind::Rejected).lost()),
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
                Some(ErrorClass::new(BackendErrorKind::Unavailable))
            }
            _ => Some(ErrorClass::new(BackendErrorKind::Rejected)),
        }
    }
}
