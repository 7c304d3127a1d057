#![doc = include_str!("../README.md")]

mod builder;
mod dialect;
mod error;
mod mark;
mod parts;
mod retire;
mod row;
mod tables;
mod transaction;

pub use builder::FenceBuilder;
pub use dialect::{Dialect, ErrorClass};
pub use error::{commit, corrupt, map_error, release, user_sql_error};
pub use mark::{admit_transaction, snapshot, Admitted, Locked, Remember};
pub use parts::FenceCore;
pub use retire::retire;
pub use row::RowFence;
pub use tables::Tables;
pub use transaction::FencedTransaction;

#[doc(hidden)]
pub mod __private {
    pub use async_trait;
    pub use fence_core;
    pub use sqlx;
}

/// Defines an adapter's free functions over its [`Dialect`] `$dialect`, so its modules call
/// them without naming the dialect: `map_error`, `user_sql_error`, `corrupt`, `commit` and
/// `release` (the generic functions of this crate, for that dialect).
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
    };
}

/// Implements fence-core's `Fence` and `FencedStore` for an SQL adapter's fence `$fence` of
/// dialect `$dialect`, from its inherent `claim_now`, `write_now` and `read_now` and its
/// [`FenceCore`]'s capabilities (the fence dereferences to its `FenceCore`).
#[macro_export]
macro_rules! fenced_store {
    ($fence:ty, $dialect:ty) => {
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
                self.claim_now(domain, token).await
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
