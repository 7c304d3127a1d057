//! The key layout: which object key each fenced object has.
//!
//! The rule, injective for every legal input:
//!
//! - The prefix is empty or ends with `/` (checked by the builder), so it is everything up to and
//!   including the key's last `/`.
//! - After the prefix comes ONE segment with no `/`:
//!   - a domain's object: the domain's escaped form ([`Domain::escaped`]: `[A-Za-z0-9._-]` kept,
//!     every other byte `%XX`), with the names `.` and `..` spelled `%2E` and `%2E%2E` (S3 paths
//!     normalise them away; an escaped domain never holds `%2E`, so the spelling is unique);
//!   - Fence's own objects: a segment that starts with `!`, which no escaped domain holds:
//!     `!data!<escaped domain>!<escaped name>` for immutable data objects and
//!     `!probe!<nonce>` for the capability probe.
//!
//! So (prefix, domain) and (prefix, domain, name) can be read back from a key, no two
//! configurations share a key, and no domain can ever reach an internal object.

use fence_core::{Domain, FenceError, InvalidInput};

use crate::error::BACKEND;

/// The greatest object key AWS S3 accepts, in bytes.
pub const DEFAULT_MAX_KEY_BYTES: usize = 1024;
/// The greatest key segment (between two `/`) filesystem-backed S3 servers accept, in bytes
/// (SeaweedFS and MinIO answer `KeyTooLongError` above 255).
pub const DEFAULT_MAX_SEGMENT_BYTES: usize = 255;

/// Builds object keys under a validated prefix.
#[derive(Clone, Debug)]
pub(crate) struct KeyScheme {
    prefix: String,
    max_key_bytes: usize,
    max_segment_bytes: usize,
}

impl KeyScheme {
    pub(crate) fn new(
        prefix: String,
        max_key_bytes: usize,
        max_segment_bytes: usize,
    ) -> Result<Self, InvalidInput> {
        let invalid = |why: String| Err(InvalidInput::Configuration(why));
        if !(prefix.is_empty() || prefix.ends_with('/')) {
            return invalid(format!(
                "key prefix `{}` must be empty or end with `/`, so that no two prefixes share a key",
                prefix.escape_debug()
            ));
        }
        if prefix.len() > 512 || prefix.chars().any(char::is_control) {
            return invalid(
                "key prefix must be at most 512 bytes without control characters".into(),
            );
        }
        if max_segment_bytes < 64 || max_key_bytes < prefix.len() + 64 {
            return invalid(format!(
                "key limits ({max_key_bytes} per key, {max_segment_bytes} per segment) leave less than 64 bytes for a domain after the prefix"
            ));
        }
        Ok(KeyScheme {
            prefix,
            max_key_bytes,
            max_segment_bytes,
        })
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object key of a domain, or `KeyTooLong` before any I/O.
    pub(crate) fn object(&self, domain: &Domain) -> Result<String, FenceError> {
        let segment = match domain.as_str() {
            "." => "%2E".to_owned(),
            ".." => "%2E%2E".to_owned(),
            _ => domain.escaped(),
        };
        self.key(domain, segment, "")
    }

    /// The key of immutable data object `name` of `domain`; `name` follows the domain rules.
    pub(crate) fn data(&self, domain: &Domain, name: &str) -> Result<String, FenceError> {
        let name = Domain::new(name)?;
        self.key(
            domain,
            format!("!data!{}!{}", domain.escaped(), name.escaped()),
            "data ",
        )
    }

    /// The key of a capability probe object.
    pub(crate) fn probe(&self, nonce: u64) -> String {
        format!("{}!probe!{nonce:016x}", self.prefix)
    }

    /// `kind` is `""` for a domain's object and `"data "` for a data object, so that the error
    /// says whose key is too long.
    fn key(&self, domain: &Domain, segment: String, kind: &str) -> Result<String, FenceError> {
        let too_long = |what: &'static str, len, max| {
            let what = match (kind, what) {
                ("data ", "segment") => "data object key segment",
                ("data ", _) => "data object key",
                (_, "segment") => "key segment",
                _ => "object key",
            };
            Err(InvalidInput::KeyTooLong {
                backend: BACKEND,
                domain: domain.clone(),
                what,
                len,
                max,
            }
            .into())
        };
        if segment.len() > self.max_segment_bytes {
            return too_long("segment", segment.len(), self.max_segment_bytes);
        }
        let len = self.prefix.len() + segment.len();
        if len > self.max_key_bytes {
            return too_long("key", len, self.max_key_bytes);
        }
        Ok(format!("{}{segment}", self.prefix))
    }
}

#[cfg(test)]
#[allow(clippy::panic)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn scheme(prefix: &str) -> KeyScheme {
        KeyScheme::new(
            prefix.to_owned(),
            DEFAULT_MAX_KEY_BYTES,
            DEFAULT_MAX_SEGMENT_BYTES,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn d(name: &str) -> Domain {
        Domain::new(name).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn prefixes_that_could_run_into_a_domain_are_refused() {
        for bad in ["t1", "t12", "a/b", "x\ny/"] {
            assert!(
                KeyScheme::new(bad.to_owned(), 1024, 255).is_err(),
                "{bad:?}"
            );
        }
        for good in ["", "t1/", "a/b/", "/"] {
            assert!(
                KeyScheme::new(good.to_owned(), 1024, 255).is_ok(),
                "{good:?}"
            );
        }
    }

    #[test]
    fn keys_are_injective_across_prefixes_domains_and_internal_objects() {
        let prefixes = ["", "t1/", "t12/", "t1/2/", "t1/!data!/", "t1/%2E/"];
        let names = [
            "x",
            "2x",
            "x/y",
            "2",
            ".",
            "..",
            "%2E",
            "...",
            "!data",
            ".data",
            ".fence-probe",
            "!probe!0000000000000000",
            "a!b",
            "a%21b",
            "é",
        ];
        let mut seen: HashMap<String, String> = HashMap::new();
        let mut note = |key: String, what: String| {
            if let Some(other) = seen.insert(key.clone(), what.clone()) {
                panic!("{what} and {other} share the key {key}");
            }
        };
        for prefix in prefixes {
            let keys = scheme(prefix);
            note(keys.probe(0), format!("probe under {prefix:?}"));
            for name in names {
                let domain = d(name);
                let object = keys.object(&domain).unwrap_or_else(|e| panic!("{e}"));
                assert!(!object[prefix.len()..].contains('/'), "{object}");
                note(object, format!("domain {name:?} under {prefix:?}"));
                for data in names {
                    let key = keys.data(&domain, data).unwrap_or_else(|e| panic!("{e}"));
                    note(key, format!("data {data:?} of {name:?} under {prefix:?}"));
                }
            }
        }
    }

    #[test]
    fn dot_names_get_keys_s3_does_not_normalise() {
        let keys = scheme("p/");
        assert_eq!(keys.object(&d(".")).ok().as_deref(), Some("p/%2E"));
        assert_eq!(keys.object(&d("..")).ok().as_deref(), Some("p/%2E%2E"));
        assert_eq!(keys.object(&d("...")).ok().as_deref(), Some("p/..."));
    }

    #[test]
    fn overlong_keys_are_invalid_input_naming_the_domain() {
        let keys = scheme("p/");
        let wide = d(&"é".repeat(128)); // 256 bytes, 768 escaped
        match keys.object(&wide) {
            Err(FenceError::InvalidInput(InvalidInput::KeyTooLong {
                domain, len, max, ..
            })) => {
                assert_eq!((domain, len, max), (wide.clone(), 768, 255));
            }
            other => panic!("expected KeyTooLong, got {other:?}"),
        }
        assert!(keys.object(&d(&"a".repeat(255))).is_ok());
        assert!(keys.object(&d(&"a".repeat(256))).is_err());
        let deep = KeyScheme::new(format!("{}/", "p".repeat(511)), 700, 255)
            .unwrap_or_else(|e| panic!("{e}"));
        let err = deep.object(&d(&"a".repeat(250)));
        assert!(
            matches!(
                err,
                Err(FenceError::InvalidInput(InvalidInput::KeyTooLong {
                    what: "object key",
                    len: 762,
                    ..
                }))
            ),
            "{err:?}"
        );
        assert!(matches!(
            keys.data(&d("x"), ""),
            Err(FenceError::InvalidInput(_))
        ));
    }
}
