//! What an adapter provides so the suite can drive its real backend.

use std::sync::Arc;

use async_trait::async_trait;
use fence_core::{BoxError, Domain, FencedLog, FencedStore};

/// A store under test, plus the hooks some scenarios need.
#[async_trait]
pub trait StoreHarness: Send + Sync {
    /// The store under test. Called again after [`StoreHarness::restart`].
    fn store(&self) -> Arc<dyn FencedStore>;

    /// Another holder's client of the same backend, as another process would open it: its own
    /// connections and caches. Scenarios present stale tokens through a fresh one, so that the
    /// server, not a client-side cache, decides. Adapters whose clients keep no state may keep
    /// the default, [`StoreHarness::store`].
    fn holder(&self) -> Arc<dyn FencedStore> {
        self.store()
    }

    /// Restarts the backend server, keeping its data; `Ok(false)` if this harness cannot.
    async fn restart(&self) -> Result<bool, BoxError> {
        Ok(false)
    }

    /// A store configured like [`StoreHarness::store`] but pointing at an address where no
    /// server listens, so that scenarios can prove invalid input is refused before any I/O.
    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        None
    }

    /// Overwrites `part` of `domain`'s state at the resource (the domain has a value written
    /// through the store) with what Fence never writes there — a mark that is not a canonical
    /// token, an entry whose kind, writer or revision does not parse — as another program, a
    /// hand edit or a damaged restore would, going around Fence. `Ok(false)` when the store
    /// keeps no such part in a form that can hold it (typed values in memory).
    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let _ = (domain, part);
        Ok(false)
    }

    /// The scenarios this adapter declares not applicable, each with why: the one reviewed
    /// list per adapter. A scenario that answers not-applicable without being listed here
    /// fails, and so does a listed one that runs and passes (the list must stay true).
    fn not_applicable(&self) -> NotApplicable {
        &[]
    }

    /// Concurrent writers in the race scenarios (at least 8 unless the backend slows losers
    /// heavily, as SeaweedFS does).
    fn race_writers(&self) -> usize {
        10
    }

    /// Operations per writer in the race scenarios.
    fn race_rounds(&self) -> usize {
        25
    }
}

/// Scenarios declared not applicable: (scenario name, why).
pub type NotApplicable = &'static [(&'static str, &'static str)];

/// A part of a domain's state at the resource, for [`StoreHarness::corrupt`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatePart {
    /// The high-water mark.
    Mark,
    /// The entry's own record: its kind (value or tombstone), writer token and revision.
    Entry,
}

/// A log under test, plus the hooks some scenarios need.
#[async_trait]
pub trait LogHarness: Send + Sync {
    /// The log under test. Called again after [`LogHarness::restart`].
    fn log(&self) -> Arc<dyn FencedLog>;

    /// Another holder's client of the same log, as another process would open it (see
    /// [`StoreHarness::holder`]).
    fn holder(&self) -> Arc<dyn FencedLog> {
        self.log()
    }

    /// Restarts the backend server, keeping its data; `Ok(false)` if this harness cannot.
    async fn restart(&self) -> Result<bool, BoxError> {
        Ok(false)
    }

    /// A log pointing at an address where no server listens (see
    /// [`StoreHarness::unreachable_store`]).
    fn unreachable_log(&self) -> Option<Arc<dyn FencedLog>> {
        None
    }

    /// The scenarios this adapter declares not applicable, each with why (see
    /// [`StoreHarness::not_applicable`]).
    fn not_applicable(&self) -> NotApplicable {
        &[]
    }

    /// Concurrent appenders in the race scenario.
    fn race_writers(&self) -> usize {
        8
    }

    /// Batches per appender in the race scenario.
    fn race_rounds(&self) -> usize {
        10
    }
}
