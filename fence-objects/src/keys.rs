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
//!
//! [`KeyLayout::Verbatim`] instead puts the domain after the prefix as written, `/` included, so
//! that existing layouts (`sales/2026/part-0.csv`) are fenced in place. It is still injective
//! (the key is the prefix plus the domain) and still keeps domains off Fence's own objects: a
//! domain that starts with `!`, has an empty, `.` or `..` segment, or starts or ends with `/` is
//! refused with [`InvalidInput::DomainNotAKey`], since S3 paths would normalise it or it could
//! reach an internal key. Only across prefixes that nest (`a/` and `a/b/`) can two
//! configurations name the same object: give each fence a prefix of its own.

use fence_core::{Domain, FenceError, InvalidInput};

/// The greatest object key AWS S3 accepts, in bytes.
pub const DEFAULT_MAX_KEY_BYTES: usize = 1024;
/// The greatest key segment (between two `/`) filesystem-backed S3 servers accept, in bytes
/// (SeaweedFS and MinIO answer `KeyTooLongError` above 255).
pub const DEFAULT_MAX_SEGMENT_BYTES: usize = 255;

/// How a domain becomes the object key after the prefix.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyLayout {
    /// The domain's escaped form, one segment (`2026/q3` is `2026%2Fq3`): every domain fits.
    #[default]
    Escaped,
    /// The domain as written, `/` allowed (`sales/2026/part-0.csv`), for fencing an existing
    /// object layout in place; domains S3 would normalise or that start with `!` are refused.
    Verbatim,
}

impl KeyLayout {
    /// The layout a setting names: `escaped` or `verbatim` (surrounding spaces ignored).
    pub fn from_name(name: &str) -> Option<Self> {
        [KeyLayout::Escaped, KeyLayout::Verbatim]
            .into_iter()
            .find(|layout| layout.name() == name.trim())
    }

    /// The layout's name in settings: `escaped` or `verbatim`.
    pub fn name(self) -> &'static str {
        match self {
            KeyLayout::Escaped => "escaped",
            KeyLayout::Verbatim => "verbatim",
        }
    }
}

/// Builds object keys under a validated prefix; errors name `backend`.
#[derive(Clone, Debug)]
pub struct KeyScheme {
    backend: &'static str,
    prefix: String,
    layout: KeyLayout,
    max_key_bytes: usize,
    max_segment_bytes: usize,
}

impl KeyScheme {
    /// A scheme under `prefix` (empty, or ending with `/`) with `layout`, for an endpoint that
    /// accepts keys of `max_key_bytes` and segments of `max_segment_bytes`; a prefix that could
    /// share keys with another, or limits that leave no room for a domain, are refused.
    pub fn new(
        backend: &'static str,
        prefix: String,
        layout: KeyLayout,
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
            backend,
            prefix,
            layout,
            max_key_bytes,
            max_segment_bytes,
        })
    }

    /// The prefix (empty, or ending with `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object key of a domain, or `KeyTooLong` before any I/O.
    pub fn object(&self, domain: &Domain) -> Result<String, FenceError> {
        if self.layout == KeyLayout::Verbatim {
            return self.verbatim(domain);
        }
        let segment = match domain.as_str() {
            "." => "%2E".to_owned(),
            ".." => "%2E%2E".to_owned(),
            _ => domain.escaped(),
        };
        self.key(domain, segment, "")
    }

    fn verbatim(&self, domain: &Domain) -> Result<String, FenceError> {
        let name = domain.as_str();
        let refuse = |reason| {
            Err(InvalidInput::DomainNotAKey {
                backend: self.backend,
                domain: domain.clone(),
                reason,
            }
            .into())
        };
        if name.starts_with('!') {
            return refuse("keys starting with `!` are the fence's own objects");
        }
        if name.starts_with('/') || name.ends_with('/') {
            return refuse("a verbatim key must not start or end with `/`");
        }
        let mut longest = "";
        for segment in name.split('/') {
            if matches!(segment, "" | "." | "..") {
                return refuse("S3 paths normalise empty, `.` and `..` segments away");
            }
            if segment.len() > longest.len() {
                longest = segment;
            }
        }
        self.key(domain, longest.to_owned(), "")?;
        let len = self.prefix.len() + name.len();
        if len > self.max_key_bytes {
            return Err(InvalidInput::KeyTooLong {
                backend: self.backend,
                domain: domain.clone(),
                what: "object key",
                len,
                max: self.max_key_bytes,
            }
            .into());
        }
        Ok(format!("{}{name}", self.prefix))
    }

    /// What the keys of `domain`'s immutable data objects start with.
    pub fn data_prefix(&self, domain: &Domain) -> String {
        format!("{}!data!{}!", self.prefix, domain.escaped())
    }

    /// The key of immutable data object `name` of `domain`; `name` follows the domain rules.
    pub fn data(&self, domain: &Domain, name: &str) -> Result<String, FenceError> {
        let name = Domain::new(name)?;
        self.key(
            domain,
            format!("!data!{}!{}", domain.escaped(), name.escaped()),
            "data ",
        )
    }

    /// Checks a plain object key the caller chose (`put_plain`): within the
    /// endpoint's limits, and never a key this fence owns (a domain's object or an internal
    /// one), so a plain object can never block or shadow a fenced one.
    pub fn plain(&self, key: &str) -> Result<(), FenceError> {
        let refuse = |reason| {
            Err(InvalidInput::InvalidKey {
                backend: self.backend,
                key: key.chars().take(120).collect(),
                reason,
            }
            .into())
        };
        if key.is_empty() || key.chars().any(char::is_control) {
            return refuse("a key must be non-empty, without control characters");
        }
        if key.len() > self.max_key_bytes
            || key.split('/').any(|s| s.len() > self.max_segment_bytes)
        {
            return refuse("over the endpoint's key or segment length limit");
        }
        if let Some(rest) = key.strip_prefix(&self.prefix) {
            if self.layout == KeyLayout::Verbatim || !rest.contains('/') {
                return refuse(
                    "the fence's prefix holds fenced objects: put plain objects elsewhere",
                );
            }
        }
        Ok(())
    }

    /// The key of a capability probe object.
    pub fn probe(&self, nonce: u64) -> String {
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
                backend: self.backend,
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
            "s3",
            prefix.to_owned(),
            KeyLayout::Escaped,
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
                KeyScheme::new("s3", bad.to_owned(), KeyLayout::Escaped, 1024, 255).is_err(),
                "{bad:?}"
            );
        }
        for good in ["", "t1/", "a/b/", "/"] {
            assert!(
                KeyScheme::new("s3", good.to_owned(), KeyLayout::Escaped, 1024, 255).is_ok(),
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
        let deep = KeyScheme::new(
            "s3",
            format!("{}/", "p".repeat(511)),
            KeyLayout::Escaped,
            700,
            255,
        )
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

    fn verbatim(prefix: &str) -> KeyScheme {
        KeyScheme::new(
            "s3",
            prefix.to_owned(),
            KeyLayout::Verbatim,
            DEFAULT_MAX_KEY_BYTES,
            DEFAULT_MAX_SEGMENT_BYTES,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn verbatim_keys_keep_the_layout_and_stay_off_internal_objects() {
        let keys = verbatim("lake/");
        assert_eq!(
            keys.object(&d("sales/2026/part-0.csv")).ok().as_deref(),
            Some("lake/sales/2026/part-0.csv")
        );
        assert_eq!(
            keys.object(&d("a b%2F")).ok().as_deref(),
            Some("lake/a b%2F")
        );
        for bad in [
            "!data!x!y",
            "!probe!0000000000000000",
            "/abs",
            "dir/",
            "a//b",
            "./a",
            "a/../b",
            "..",
        ] {
            match keys.object(&d(bad)) {
                Err(FenceError::InvalidInput(InvalidInput::DomainNotAKey { domain, .. })) => {
                    assert_eq!(domain.as_str(), bad);
                }
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
        // Injective among domains and away from the internal objects of the same prefix.
        let mut seen: HashMap<String, String> = HashMap::new();
        for name in ["x", "x/y", "x%2Fy", "y", "x/y/z", ".data", "a!b", "é/ü"] {
            let domain = d(name);
            let object = keys.object(&domain).unwrap_or_else(|e| panic!("{e}"));
            assert!(!object["lake/".len()..].starts_with('!'));
            assert!(seen.insert(object, name.to_owned()).is_none(), "{name}");
            let data = keys.data(&domain, "part").unwrap_or_else(|e| panic!("{e}"));
            assert!(seen.insert(data, format!("data of {name}")).is_none());
        }
        assert!(seen.insert(keys.probe(0), "probe".into()).is_none());
    }

    #[test]
    fn verbatim_segments_and_keys_are_bounded() {
        let keys = KeyScheme::new("s3", "p/".into(), KeyLayout::Verbatim, 1024, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(keys.object(&d(&format!("{}/b", "a".repeat(100)))).is_ok());
        let err = keys.object(&d(&format!("b/{}", "a".repeat(101))));
        assert!(
            matches!(
                err,
                Err(FenceError::InvalidInput(InvalidInput::KeyTooLong {
                    what: "key segment",
                    len: 101,
                    ..
                }))
            ),
            "{err:?}"
        );
        let deep = KeyScheme::new(
            "s3",
            format!("{}/", "p".repeat(511)),
            KeyLayout::Verbatim,
            700,
            255,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let nested = format!("{}/{}", "s".repeat(120), "t".repeat(120));
        assert!(matches!(
            deep.object(&d(&nested)),
            Err(FenceError::InvalidInput(InvalidInput::KeyTooLong {
                what: "object key",
                ..
            }))
        ));
    }

    #[test]
    fn plain_keys_never_reach_fenced_objects() {
        let escaped = scheme("fence/");
        assert!(escaped.plain("lake/sales/part-0.csv").is_ok());
        assert!(escaped.plain("fence/deeper/part-0.csv").is_ok());
        let verbatim = verbatim("fence/");
        assert!(verbatim.plain("lake/part-0.csv").is_ok());
        let root = scheme("");
        assert!(root.plain("lake/part-0.csv").is_ok());
        for (keys, bad) in [
            (&escaped, "fence/x"),
            (&escaped, "fence/!data!x!y"),
            (&verbatim, "fence/deeper/part-0.csv"),
            (&root, "x"),
            (&root, ""),
            (&root, "a\nb/c"),
        ] {
            assert!(
                matches!(
                    keys.plain(bad),
                    Err(FenceError::InvalidInput(InvalidInput::InvalidKey { .. }))
                ),
                "{bad:?}"
            );
        }
        assert!(root.plain(&format!("a/{}", "b".repeat(256))).is_err());
    }
}
