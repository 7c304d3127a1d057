//! Where Fence keeps its state in etcd's key space, all under one prefix (`<p>`), each domain
//! spelled with [`Domain::escaped`] (no `/` inside, so one domain's keys never nest in
//! another's):
//!
//! ```text
//! <p>/lease/<domain>          the lock key: created under the holder's etcd lease; its
//!                             create_revision is the holder's token
//! <p>/issued/<domain>         written by the issuer: the put's revision is the issued token
//! <p>/store/<domain>/state    `fence-store/2 <mark> <entry head | none>`, LF, the value's
//!                             bytes: the domain's whole state, rewritten by every change
//! <p>/store/<domain>/ops      remembered operation ids, one fence-core op line each
//! <p>/rebases/<domain>/<n>    an operator's re-base (a fence-core `RebaseRecord` line), `n`
//!                             the state key's revision it replaced (20 digits)
//! <p>/settings                the prefix's admission settings, which every write and claim
//!                             reads and compares (absent: none)
//! ```
//!
//! A folder of layout 1 (before the `state` key: `mark`, `entry` and `value` keys, each one
//! part of the state) is still read, and its next change replaces those keys with `state`.

use fence_core::{Domain, InvalidInput};

/// The longest key prefix accepted.
pub const MAX_PREFIX_BYTES: usize = 256;

/// The keys of a prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    prefix: String,
}

/// One of a domain's store keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKey {
    /// The domain's state (layout 2).
    State,
    Ops,
    /// Layout 1's parts of the state.
    Mark,
    Entry,
    Value,
}

impl StoreKey {
    pub(crate) const ALL: [StoreKey; 5] = [
        StoreKey::State,
        StoreKey::Ops,
        StoreKey::Mark,
        StoreKey::Entry,
        StoreKey::Value,
    ];

    /// The keys a layout-1 folder holds instead of `state`.
    pub(crate) const LAYOUT_1: [StoreKey; 3] = [StoreKey::Mark, StoreKey::Entry, StoreKey::Value];

    pub(crate) const fn name(self) -> &'static str {
        match self {
            StoreKey::State => "state",
            StoreKey::Mark => "mark",
            StoreKey::Entry => "entry",
            StoreKey::Value => "value",
            StoreKey::Ops => "ops",
        }
    }
}

impl Keys {
    /// Keys under `prefix`: visible ASCII, not empty, no trailing `/`, at most
    /// [`MAX_PREFIX_BYTES`].
    pub(crate) fn new(prefix: &str) -> Result<Self, InvalidInput> {
        let refuse = |reason: &str| {
            Err(InvalidInput::Configuration(format!(
                "etcd key prefix `{}`: {reason}",
                prefix.chars().take(80).collect::<String>()
            )))
        };
        if prefix.is_empty() {
            return refuse("empty (use e.g. `/fence`)");
        }
        if prefix.len() > MAX_PREFIX_BYTES {
            return refuse("longer than 256 bytes");
        }
        if !prefix.bytes().all(|b| b.is_ascii_graphic()) {
            return refuse("only visible ASCII characters are allowed");
        }
        if prefix.ends_with('/') {
            return refuse("must not end with `/` (Fence adds its own separators)");
        }
        Ok(Keys {
            prefix: prefix.to_owned(),
        })
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key of the prefix's admission settings.
    pub(crate) fn settings(&self) -> String {
        format!("{}/settings", self.prefix)
    }

    /// The domain's lock key.
    pub(crate) fn lock(&self, domain: &Domain) -> String {
        format!("{}/lease/{}", self.prefix, domain.escaped())
    }

    /// The key the issuer writes for the domain.
    pub(crate) fn issued(&self, domain: &Domain) -> String {
        format!("{}/issued/{}", self.prefix, domain.escaped())
    }

    /// The folder of the domain's store keys, ending in `/`.
    pub(crate) fn store_dir(&self, domain: &Domain) -> String {
        format!("{}/store/{}/", self.prefix, domain.escaped())
    }

    /// The folder of the domain's re-base records, ending in `/`.
    pub(crate) fn rebases_dir(&self, domain: &Domain) -> String {
        format!("{}/rebases/{}/", self.prefix, domain.escaped())
    }

    /// The record of a re-base that replaced the state written at `version`.
    pub(crate) fn rebase(&self, domain: &Domain, version: i64) -> String {
        format!("{}{version:020}", self.rebases_dir(domain))
    }

    /// One of the domain's store keys.
    pub(crate) fn store(&self, domain: &Domain, key: StoreKey) -> String {
        format!("{}{}", self.store_dir(domain), key.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_checked_and_domains_never_nest() {
        for bad in ["", "/fence/", "/fen ce", "/fence\n", &"x".repeat(257)] {
            assert!(Keys::new(bad).is_err(), "{bad:?}");
        }
        let keys = Keys::new("/fence").unwrap_or_else(|e| unreachable!("{e}"));
        let d = |s: &str| Domain::new(s).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(keys.lock(&d("a/b")), "/fence/lease/a%2Fb");
        assert_eq!(keys.store(&d("a"), StoreKey::State), "/fence/store/a/state");
        // `a` and `a/mark` cannot share keys: the slash is escaped.
        assert!(!keys
            .store_dir(&d("a/state"))
            .starts_with(&keys.store_dir(&d("a"))));
    }
}
