//! The commit-pointer pattern's answers: a create-only write of an immutable object, and the
//! manifest a domain's fenced value points at.

use fence_core::{Domain, FenceError, FencingToken, Revision, Snapshot};

use crate::Manifest;

/// How a create-only write of an immutable or plain object ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Immutable {
    /// Created now, at this key.
    Created(String),
    /// An object already exists at this key and was left alone.
    AlreadyExists(String),
}

impl fence_core::raw::OutcomeLabel for Immutable {
    fn outcome_label(&self) -> &'static str {
        match self {
            Immutable::Created(_) => "accepted",
            Immutable::AlreadyExists(_) => "duplicate",
        }
    }
}

/// What resolving a domain's commit pointer found: the committed manifest and the write that
/// committed it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Resolved {
    /// The plain objects' keys.
    pub manifest: Manifest,
    /// The token of the write that committed it.
    pub token: FencingToken,
    /// Its revision.
    pub revision: Revision,
}

/// The manifest `snapshot` (a read of the domain's object) points at, with the write that
/// committed it; `None` when the domain holds no value. A value that is not a manifest is
/// [`FenceError::CorruptState`] of `backend`.
pub fn resolved(
    backend: &'static str,
    domain: &Domain,
    snapshot: &Snapshot,
) -> Result<Option<Resolved>, FenceError> {
    let (Some(value), Some(token), Some(revision)) =
        (snapshot.value(), snapshot.written_by(), snapshot.revision())
    else {
        return Ok(None);
    };
    let manifest = Manifest::parse(value).map_err(|why| {
        FenceError::corrupt(backend, domain, format!("the domain's value: {why}"))
    })?;
    Ok(Some(Resolved {
        manifest,
        token,
        revision,
    }))
}
