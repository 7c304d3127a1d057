//! The fence's tables as found in the database, as errors: of another shape, or missing.

use fence_core::raw::Shape;
use fence_core::{BackendErrorKind, Domain, FenceError};
use sqlx::Pool;

use crate::{corrupt, Dialect, Tables};

/// The tables' shape as `found` by the dialect's check, as the error of a call on `domain`
/// (`None`: a call that concerns no domain, such as `migrate`): tables of another shape fail
/// closed (`CorruptState` on a domain, a `Rejected` backend error otherwise), missing ones are
/// a `NotFound` backend error naming the table.
pub fn shape_result<D: Dialect>(
    found: Option<Shape>,
    tables: &Tables<D>,
    domain: Option<&Domain>,
) -> Result<(), FenceError> {
    match (found, domain) {
        (None, _) => Ok(()),
        (Some(Shape::Wrong(detail)), Some(domain)) => Err(corrupt::<D>(domain, detail)),
        (Some(Shape::Wrong(detail)), None) => Err(shape_error::<D>(detail)),
        (Some(Shape::Missing(table)), domain) => Err(FenceError::backend(
            D::BACKEND,
            BackendErrorKind::NotFound,
            domain,
            D::not_migrated(tables.name().to_owned(), table),
        )),
    }
}

/// Checks the tables' shape for a call that concerns no domain (`migrate`, the settings).
pub async fn require_shape<D: Dialect>(
    pool: &Pool<D::Db>,
    tables: &Tables<D>,
) -> Result<(), FenceError> {
    let found = D::check_shape(pool, tables)
        .await
        .map_err(unscoped_error::<D>)?;
    shape_result(found, tables, None)
}

/// A driver or server error in a call that concerns no domain.
pub fn unscoped_error<D: Dialect>(error: sqlx::Error) -> FenceError {
    FenceError::backend(
        D::BACKEND,
        D::classify(&error).kind,
        None,
        D::Error::from(error),
    )
}

/// Tables or settings of another shape than the adapter's migration gives them, in a call that
/// concerns no domain.
pub fn shape_error<D: Dialect>(detail: String) -> FenceError {
    FenceError::backend(
        D::BACKEND,
        BackendErrorKind::Rejected,
        None,
        D::shape(detail),
    )
}
