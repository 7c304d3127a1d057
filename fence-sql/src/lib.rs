#![doc = include_str!("../README.md")]

mod builder;
mod dialect;
mod error;
mod lease;
mod mark;
mod parts;
mod rebase;
mod retire;
mod row;
mod shape;
mod tables;
mod transaction;
mod transactional;

pub use builder::FenceBuilder;
pub use dialect::{Dialect, ErrorClass};
pub use error::{commit, corrupt, map_error, release, user_sql_error};
pub use lease::{SqlIssuer, SqlLeases};
pub use mark::{
    admit_transaction, claim, snapshot, Admitted, Locked, MarkChange, MarkRows, Remember,
};
pub use parts::FenceCore;
pub use rebase::{decide_rebase, rebases, unix_ms};
pub use retire::retire;
pub use row::RowFence;
pub use shape::{require_shape, shape_error, shape_result, unscoped_error};
pub use tables::Tables;
pub use transaction::FencedTransaction;
pub use transactional::{begin, transaction, ConnectionOf, Transactional};

#[doc(hidden)]
pub mod __private {
    pub use async_trait;
    pub use fence_core;
    pub use sqlx;
}

/// Defines an adapter's free functions over its [`Dialect`] `$dialect`, so its modules call
/// them without naming the dialect: `map_error`, `user_sql_error`, `corrupt`, `commit`,
/// `unscoped_error`, `shape_error` and `require_shape` (the generic functions of this crate,
/// for that dialect).
#[macro_export]
macro_rules! dialect_functions {
    ($dialect:ty) => {
        /// Maps a sqlx error of the fence's own SQL for `operation` on `domain`
        /// ([`fence_sql::map_error`]).
        #[allow(unreachable_pub, dead_code)]
        pub fn map_error(
            error: $crate::__private::sqlx::Error,
            domain: &$crate::__private::fence_core::Domain,
            operation: $crate::__private::fence_core::Operation,
            after_send: bool,
        ) -> $crate::__private::fence_core::FenceError {
            $crate::map_error::<$dialect>(error, domain, operation, after_send)
        }

        /// Maps a sqlx error of a statement of the user's own ([`fence_sql::user_sql_error`]).
        #[allow(unreachable_pub, dead_code)]
        pub fn user_sql_error(
            error: $crate::__private::sqlx::Error,
            domain: &$crate::__private::fence_core::Domain,
            operation: $crate::__private::fence_core::Operation,
            after_send: bool,
        ) -> $crate::__private::fence_core::FenceError {
            $crate::user_sql_error::<$dialect>(error, domain, operation, after_send)
        }

        /// State at the resource that is not Fence's, or is damaged.
        #[allow(unreachable_pub, dead_code)]
        pub fn corrupt(
            domain: &$crate::__private::fence_core::Domain,
            detail: impl Into<String>,
        ) -> $crate::__private::fence_core::FenceError {
            $crate::corrupt::<$dialect>(domain, detail)
        }

        /// Commits a transaction of `operation` on `domain` (`Ambiguous` when the answer to
        /// `COMMIT` was lost: [`fence_sql::commit`]).
        #[allow(unreachable_pub, dead_code)]
        pub async fn commit(
            tx: $crate::__private::sqlx::Transaction<'static, <$dialect as $crate::Dialect>::Db>,
            domain: &$crate::__private::fence_core::Domain,
            operation: $crate::__private::fence_core::Operation,
        ) -> Result<(), $crate::__private::fence_core::FenceError> {
            $crate::commit::<$dialect>(tx, domain, operation).await
        }

        /// A driver or server error in a call that concerns no domain
        /// ([`fence_sql::unscoped_error`]).
        #[allow(unreachable_pub, dead_code)]
        pub fn unscoped_error(
            error: $crate::__private::sqlx::Error,
        ) -> $crate::__private::fence_core::FenceError {
            $crate::unscoped_error::<$dialect>(error)
        }

        /// Tables or settings of another shape, in a call that concerns no domain
        /// ([`fence_sql::shape_error`]).
        #[allow(unreachable_pub, dead_code)]
        pub fn shape_error(detail: String) -> $crate::__private::fence_core::FenceError {
            $crate::shape_error::<$dialect>(detail)
        }

        /// Checks the tables' shape for a call that concerns no domain
        /// ([`fence_sql::require_shape`]).
        #[allow(unreachable_pub, dead_code)]
        pub async fn require_shape(
            pool: &$crate::__private::sqlx::Pool<<$dialect as $crate::Dialect>::Db>,
            tables: &$crate::Tables<$dialect>,
        ) -> Result<(), $crate::__private::fence_core::FenceError> {
            $crate::require_shape::<$dialect>(pool, tables).await
        }
    };
}

/// Defines an SQL adapter's fence `$fence` of dialect `$dialect` (its attributes and docs
/// given) with what it shares with every other: a struct whose field `core` is its
/// [`FenceCore`], made from one (as [`FenceBuilder::build`] does) and dereferencing to it (the
/// pool, the tables, the limits and bounds, `issuer()`, `leases()`, `to_builder()`), its
/// `builder`, and fence-core's `Fence` and `FencedStore` from its [`MarkRows`] (claims) and its
/// inherent `write_now` and `read_now`.
#[macro_export]
macro_rules! fenced_store {
    ($(#[$meta:meta])* $vis:vis struct $fence:ident: $dialect:ty;) => {
        $(#[$meta])*
        #[derive(Clone, Debug)]
        $vis struct $fence {
            core: $crate::FenceCore<$dialect>,
        }

        impl $fence {
            /// A builder for a fence on `pool`, with its tables in `namespace` (created by the
            /// crate's `migrate`).
            pub fn builder(
                pool: $crate::__private::sqlx::Pool<<$dialect as $crate::Dialect>::Db>,
                namespace: &str,
            ) -> $crate::FenceBuilder<$dialect> {
                $crate::FenceBuilder::new(pool, namespace)
            }

            /// Checks, without writing, that the pool's user has every privilege the fence,
            /// its issuer, its leases and a re-base need on the fence's tables (see the
            /// crate's documentation, "Permissions"): the server answers for each. Tables
            /// that do not exist are reported as unknown: run the crate's `migrate`.
            pub async fn check_permissions(
                &self,
            ) -> Result<
                $crate::__private::fence_core::permissions::PermissionReport,
                $crate::__private::fence_core::FenceError,
            > {
                <$dialect as $crate::Dialect>::check_permissions(self).await
            }
        }

        impl From<$crate::FenceCore<$dialect>> for $fence {
            fn from(core: $crate::FenceCore<$dialect>) -> Self {
                $fence { core }
            }
        }

        /// The parts every SQL fence has: its pool (`pool()`), its tables, limits and bounds,
        /// and `to_builder()` for a fence that differs in some of them.
        impl ::core::ops::Deref for $fence {
            type Target = $crate::FenceCore<$dialect>;

            fn deref(&self) -> &$crate::FenceCore<$dialect> {
                &self.core
            }
        }

        #[$crate::__private::async_trait::async_trait]
        impl $crate::__private::fence_core::Fence for $fence {
            fn backend(&self) -> &'static str {
                <$dialect as $crate::Dialect>::BACKEND
            }

            fn capabilities(&self) -> $crate::__private::fence_core::Capabilities {
                <$fence as ::core::ops::Deref>::deref(self).store_capabilities()
            }

            async fn claim(
                &self,
                domain: &$crate::__private::fence_core::Domain,
                token: $crate::__private::fence_core::FencingToken,
            ) -> Result<
                $crate::__private::fence_core::Claimed,
                $crate::__private::fence_core::FenceError,
            > {
                $crate::claim(self, domain, token).await
            }

            async fn high_water_mark(
                &self,
                domain: &$crate::__private::fence_core::Domain,
            ) -> Result<
                Option<$crate::__private::fence_core::FencingToken>,
                $crate::__private::fence_core::FenceError,
            > {
                Ok(self.read_now(domain).await?.high_water_mark)
            }
        }

        #[$crate::__private::async_trait::async_trait]
        impl $crate::__private::fence_core::FencedStore for $fence {
            async fn write(
                &self,
                request: &$crate::__private::fence_core::WriteRequest,
            ) -> Result<
                $crate::__private::fence_core::WriteOutcome,
                $crate::__private::fence_core::FenceError,
            > {
                self.write_now(request).await
            }

            async fn read(
                &self,
                domain: &$crate::__private::fence_core::Domain,
            ) -> Result<
                $crate::__private::fence_core::Snapshot,
                $crate::__private::fence_core::FenceError,
            > {
                self.read_now(domain).await
            }
        }
    };
}

/// Gives an SQL adapter's fence `$fence` (of crate `$krate`, dialect `$dialect`) its `begin`
/// and `transaction`, from its [`Transactional::begin_now`] (the lock, [`admit_transaction`]
/// and the dialect's set-up of the admitted transaction).
#[macro_export]
macro_rules! fenced_transactions {
    ($krate:ident, $fence:ident, $dialect:ty) => {
        impl $fence {
            /// Begins a fenced transaction: locks the domain's mark row, answers a remembered
            /// op id with [`fence_core::Begun::Duplicate`], refuses a stale token
            /// ([`fence_core::FenceError::Fenced`]: below the mark, or equal under
            /// [`fence_core::EqualTokenPolicy::Strict`]) before any of your SQL runs, and hands
            /// you the transaction, which holds the mark row until it ends (see
            /// [`FencedTransaction`] for when the mark is written and what `commit` reports).
            ///
            /// Holders of one domain serialize on the mark row: keep the transaction short.
            /// Run every statement on it; never send `COMMIT` or `ROLLBACK` yourself. Counted
            /// as a `write` of the domain in the backend's metrics.
            ///
            /// ```no_run
            #[doc = concat!("# async fn run(fence: ", stringify!($krate), "::", stringify!($fence), ") -> Result<(), Box<dyn std::error::Error>> {")]
            /// use fence_core::{Begun, Domain, FencingToken, TransactionRequest};
            /// let request = TransactionRequest::new(Domain::new("account-7")?, FencingToken::new(12)?);
            /// if let Begun::Admitted(mut tx) = fence.begin(&request).await? {
            ///     sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 7")
            ///         .execute(&mut *tx)
            ///         .await?;
            ///     tx.commit().await?;
            /// }
            /// # Ok(()) }
            /// ```
            pub async fn begin(
                &self,
                request: &$crate::__private::fence_core::TransactionRequest,
            ) -> Result<
                $crate::__private::fence_core::Begun<$crate::FencedTransaction<$dialect>>,
                $crate::__private::fence_core::FenceError,
            > {
                $crate::begin(self, request).await
            }

            /// Runs `work` — your SQL on your tables — in a fenced transaction
            #[doc = concat!("([`", stringify!($fence), "::begin`])")]
            /// and commits only if the fence admitted the token and `work` succeeded; an error
            /// from `work` rolls everything back. `work` gets the transaction's connection and
            /// may capture only owned data (clone or move what it needs); use `begin` to borrow.
            ///
            /// ```no_run
            #[doc = concat!("# async fn run(fence: ", stringify!($krate), "::", stringify!($fence), ") -> Result<(), Box<dyn std::error::Error>> {")]
            /// use fence_core::{Domain, FencingToken, TransactionRequest};
            /// let request = TransactionRequest::new(Domain::new("account-7")?, FencingToken::new(12)?);
            /// let outcome = fence
            ///     .transaction(&request, |conn| {
            ///         Box::pin(async move {
            ///             sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 7")
            ///                 .execute(&mut *conn)
            ///                 .await
            ///         })
            ///     })
            ///     .await?;
            /// # Ok(()) }
            /// ```
            pub async fn transaction<T, E, F>(
                &self,
                request: &$crate::__private::fence_core::TransactionRequest,
                work: F,
            ) -> Result<
                $crate::__private::fence_core::Transacted<T>,
                $crate::__private::fence_core::TransactionError<E>,
            >
            where
                F: for<'c> FnOnce(
                        &'c mut $crate::ConnectionOf<$dialect>,
                    ) -> $crate::__private::fence_core::BoxFuture<'c, Result<T, E>>
                    + Send,
                T: Send,
                E: Send,
            {
                $crate::transaction(self, request, work).await
            }
        }
    };
}
