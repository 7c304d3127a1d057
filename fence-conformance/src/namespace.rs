//! Unique domain names per run, so runs never see each other's state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use fence_core::Domain;

use crate::Failure;

static RUNS: AtomicU64 = AtomicU64::new(0);

/// A unique prefix for one scenario run: `fence-conformance/<scenario>/<pid>.<nanos>.<n>`.
#[derive(Clone, Debug)]
pub struct Namespace {
    prefix: String,
}

impl Namespace {
    /// A fresh namespace for `scenario`.
    pub fn new(scenario: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        Namespace {
            prefix: format!(
                "fence-conformance/{scenario}/{}.{nanos}.{run}",
                std::process::id()
            ),
        }
    }

    /// The prefix shared by every domain of this run.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A domain of this run.
    pub fn domain(&self, name: &str) -> Result<Domain, Failure> {
        Ok(Domain::new(format!("{}/{name}", self.prefix))?)
    }
}
