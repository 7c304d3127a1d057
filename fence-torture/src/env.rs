//! What a torture run reads from the environment (`scripts/torture` sets it): the profile, the
//! seed, and the file its figures are appended to (fence-conformance's seeded runs, which the
//! relay contract shares).

pub use fence_conformance::seeded::{full_profile, report, seed};
