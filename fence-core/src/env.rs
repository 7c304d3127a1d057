//! Settings from environment variables, read alike by every adapter's `from_env`.
//!
//! Each adapter documents one set of variables (`FENCE_REDIS_*`, `FENCE_S3_*`, …) and reads it
//! through an [`Env`]: an empty variable counts as unset, a value that does not parse names the
//! variable, and two variables that would each choose the same thing (a Redis URL and a Redis
//! Cluster) are refused rather than one silently winning. Values are never echoed in errors or
//! `Debug`: a URL may hold a password.
//!
//! ```
//! use fence_core::env::Env;
//! let env = Env::from_pairs([("FENCE_REDIS_URL", "redis://127.0.0.1:6379"), ("FENCE_REDIS_CLUSTER", "")]);
//! // An empty variable is unset, so only one target is chosen.
//! let target = env.one_of(&["FENCE_REDIS_URL", "FENCE_REDIS_CLUSTER"])?;
//! assert_eq!(target, Some(("FENCE_REDIS_URL", "redis://127.0.0.1:6379".to_owned())));
//!
//! let both = Env::from_pairs([("FENCE_REDIS_URL", "redis://a"), ("FENCE_REDIS_CLUSTER", "redis://b")]);
//! let refused = both.one_of(&["FENCE_REDIS_URL", "FENCE_REDIS_CLUSTER"]).unwrap_err();
//! assert_eq!(
//!     refused.to_string(),
//!     "invalid configuration: FENCE_REDIS_URL and FENCE_REDIS_CLUSTER are both set: set one"
//! );
//! # Ok::<(), fence_core::FenceError>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::sync::Arc;

use crate::{FenceError, InvalidInput};

/// The variable every adapter reads for [`crate::raw::TokenBounds`]' step: refuse tokens more than
/// this above a domain's mark (unset or `0`: no bound).
pub const MAX_TOKEN_STEP: &str = "FENCE_MAX_TOKEN_STEP";
/// The variable every adapter that can see its issuer reads to accept only tokens that issuer
/// issued (`1`/`true`); adapters that cannot see one refuse it when set.
pub const ISSUED_ONLY: &str = "FENCE_ISSUED_ONLY";

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Where settings are read from: the process environment, or any lookup (a map of settings
/// kept elsewhere, defaults layered under the environment, a test's own values).
#[derive(Clone)]
pub struct Env {
    lookup: Arc<Lookup>,
}

impl Env {
    /// The process environment.
    pub fn process() -> Self {
        Env::from_fn(|name| std::env::var(name).ok())
    }

    /// Settings answered by `lookup`.
    pub fn from_fn(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Env {
            lookup: Arc::new(lookup),
        }
    }

    /// Exactly these settings (nothing from the process environment).
    pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let map: HashMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Env::from_fn(move |name| map.get(name).cloned())
    }

    /// These settings, with `defaults` answering whatever they leave unset (an example's
    /// local servers under the user's environment).
    pub fn or_else(self, defaults: Env) -> Self {
        Env::from_fn(move |name| self.get(name).or_else(|| defaults.get(name)))
    }

    /// The variable's value; empty counts as unset.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.lookup)(name).filter(|value| !value.is_empty())
    }

    /// The variable's value, or an error naming it.
    pub fn require(&self, name: &str) -> Result<String, FenceError> {
        self.get(name)
            .ok_or_else(|| configuration(format!("{name} is not set")))
    }

    /// The variable parsed as `T`; an unparsable value is an error naming the variable (the
    /// value is not repeated: it may be a secret).
    pub fn parse<T>(&self, name: &str) -> Result<Option<T>, FenceError>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        self.get(name)
            .map(|value| {
                value
                    .trim()
                    .parse()
                    .map_err(|e| configuration(format!("{name} is not valid: {e}")))
            })
            .transpose()
    }

    /// A yes/no variable: `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off` (any case);
    /// unset is `false`.
    pub fn flag(&self, name: &str) -> Result<bool, FenceError> {
        let Some(value) = self.get(name) else {
            return Ok(false);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(configuration(format!(
                "{name} must be 1/true/yes/on or 0/false/no/off"
            ))),
        }
    }

    /// The one variable of `names` that is set, with its value; two or more set is an error
    /// naming them (two ways to choose one thing, and no rule to pick).
    pub fn one_of<'n>(&self, names: &[&'n str]) -> Result<Option<(&'n str, String)>, FenceError> {
        let set: Vec<(&'n str, String)> = names
            .iter()
            .filter_map(|&name| self.get(name).map(|value| (name, value)))
            .collect();
        match set.as_slice() {
            [] => Ok(None),
            [_] => Ok(set.into_iter().next()),
            [first, second, ..] => Err(configuration(format!(
                "{} and {} are both set: set one",
                first.0, second.0
            ))),
        }
    }

    /// Both variables' values, or neither; one without the other is an error naming both (a
    /// user name without its password).
    pub fn both_or_neither(
        &self,
        first: &str,
        second: &str,
    ) -> Result<Option<(String, String)>, FenceError> {
        match (self.get(first), self.get(second)) {
            (Some(a), Some(b)) => Ok(Some((a, b))),
            (None, None) => Ok(None),
            (Some(_), None) => Err(configuration(format!("{first} is set without {second}"))),
            (None, Some(_)) => Err(configuration(format!("{second} is set without {first}"))),
        }
    }

    /// `ours` unless `theirs` (another tool's variable for the same setting, such as
    /// `AWS_REGION`) is also set to something else: two answers that disagree are refused.
    pub fn agreeing(&self, ours: &str, theirs: &str) -> Result<Option<String>, FenceError> {
        match (self.get(ours), self.get(theirs)) {
            (Some(a), Some(b)) if a.trim() != b.trim() => Err(configuration(format!(
                "{ours} and {theirs} are both set and disagree: set one"
            ))),
            (value, _) => Ok(value),
        }
    }

    /// [`MAX_TOKEN_STEP`]: `None` when unset or `0`.
    pub fn max_token_step(&self) -> Result<Option<NonZeroU64>, FenceError> {
        Ok(self.parse::<u64>(MAX_TOKEN_STEP)?.and_then(NonZeroU64::new))
    }

    /// [`ISSUED_ONLY`].
    pub fn issued_only(&self) -> Result<bool, FenceError> {
        self.flag(ISSUED_ONLY)
    }

    /// Refuses [`ISSUED_ONLY`] for `backend`, which cannot see the issuer of its tokens.
    pub fn refuse_issued_only(&self, backend: &str) -> Result<(), FenceError> {
        if self.issued_only()? {
            return Err(configuration(format!(
                "{ISSUED_ONLY} is set, but {backend} cannot see an issuer to check tokens against: unset it"
            )));
        }
        Ok(())
    }
}

/// The variables a SQL adapter's `from_env` reads for its pool (one shape for fence-postgres
/// and fence-mysql).
#[derive(Clone, Copy, Debug)]
pub struct SqlPoolVariables {
    /// The server's URL (required; sqlx's `DATABASE_URL` must agree with it when it names
    /// a server of the same kind: one of [`SqlPoolVariables::schemes`]).
    pub url: &'static str,
    /// The schema or database of the fence's tables.
    pub namespace: &'static str,
    /// The namespace when unset.
    pub default_namespace: &'static str,
    /// The pool's size (default 10, at least 1).
    pub max_connections: &'static str,
    /// How long a request waits for a pooled connection, in milliseconds (default 5000).
    pub acquire_timeout_ms: &'static str,
    /// The product, in errors (`PostgreSQL`).
    pub product: &'static str,
    /// The URL schemes accepted (`postgres://`).
    pub schemes: &'static [&'static str],
}

/// A SQL adapter's pool settings, read and checked by [`Env::sql_pool`].
#[derive(Clone)]
#[non_exhaustive]
pub struct SqlPool {
    /// The server's URL (may hold a password: never shown).
    pub url: String,
    /// The schema or database of the fence's tables.
    pub namespace: String,
    /// The pool's size.
    pub max_connections: u32,
    /// How long a request waits for a pooled connection.
    pub acquire_timeout: std::time::Duration,
    /// The token step bound ([`MAX_TOKEN_STEP`]).
    pub max_token_step: Option<NonZeroU64>,
    /// [`ISSUED_ONLY`].
    pub issued_only: bool,
    url_variable: &'static str,
    product: &'static str,
}

impl SqlPool {
    /// The error for a URL the driver cannot parse (the URL itself is not repeated).
    pub fn invalid_url(&self) -> FenceError {
        invalid_url(self.url_variable, self.product)
    }
}

impl fmt::Debug for SqlPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlPool")
            .field("url", &redact_url(&self.url))
            .field("namespace", &self.namespace)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("max_token_step", &self.max_token_step)
            .field("issued_only", &self.issued_only)
            .finish()
    }
}

fn invalid_url(variable: &str, product: &str) -> FenceError {
    configuration(format!("{variable} is not a valid {product} URL"))
}

impl Env {
    /// A SQL adapter's pool settings from `variables`, checked before any connection is tried.
    ///
    /// ```
    /// use fence_core::env::{Env, SqlPoolVariables};
    /// const VARIABLES: SqlPoolVariables = SqlPoolVariables {
    ///     url: "FENCE_X_URL", namespace: "FENCE_X_SCHEMA", default_namespace: "fence",
    ///     max_connections: "FENCE_X_MAX_CONNECTIONS", acquire_timeout_ms: "FENCE_X_ACQUIRE_TIMEOUT_MS",
    ///     product: "X", schemes: &["x://"],
    /// };
    /// let env = Env::from_pairs([("FENCE_X_URL", "x://app:secret@db:1/app")]);
    /// let pool = env.sql_pool(&VARIABLES)?;
    /// assert_eq!((pool.namespace.as_str(), pool.max_connections), ("fence", 10));
    /// assert!(!format!("{pool:?}").contains("secret"));
    /// // sqlx's DATABASE_URL of another kind is not this adapter's business.
    /// let beside = Env::from_pairs([("FENCE_X_URL", "x://db:1/app"), ("DATABASE_URL", "y://other")]);
    /// assert!(beside.sql_pool(&VARIABLES).is_ok());
    /// let wrong = Env::from_pairs([("FENCE_X_URL", "y://db")]).sql_pool(&VARIABLES).unwrap_err();
    /// assert_eq!(wrong.to_string(), "invalid configuration: FENCE_X_URL is not a valid X URL");
    /// # Ok::<(), fence_core::FenceError>(())
    /// ```
    pub fn sql_pool(&self, variables: &SqlPoolVariables) -> Result<SqlPool, FenceError> {
        // A `DATABASE_URL` of another kind (a PostgreSQL one beside a MySQL fence) answers
        // another question: only one of the same kind must agree.
        let same_kind = |url: &str| variables.schemes.iter().any(|s| url.starts_with(s));
        let url = if self.get("DATABASE_URL").is_some_and(|url| same_kind(&url)) {
            self.agreeing(variables.url, "DATABASE_URL")?
        } else {
            self.get(variables.url)
        };
        let url = url.ok_or_else(|| {
            configuration(format!(
                "no {} configured: set {}",
                variables.product, variables.url
            ))
        })?;
        let max_connections = self.parse::<u32>(variables.max_connections)?.unwrap_or(10);
        if max_connections == 0 {
            return Err(configuration(format!(
                "{} must be at least 1",
                variables.max_connections
            )));
        }
        let acquire_timeout = self.parse::<u64>(variables.acquire_timeout_ms)?.map_or(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_millis,
        );
        if !variables
            .schemes
            .iter()
            .any(|scheme| url.starts_with(scheme))
        {
            return Err(invalid_url(variables.url, variables.product));
        }
        Ok(SqlPool {
            url,
            namespace: self
                .get(variables.namespace)
                .unwrap_or_else(|| variables.default_namespace.to_owned()),
            max_connections,
            acquire_timeout,
            max_token_step: self.max_token_step()?,
            issued_only: self.issued_only()?,
            url_variable: variables.url,
            product: variables.product,
        })
    }
}

impl fmt::Debug for Env {
    // Values may be secrets, and a lookup has no list of names: nothing to show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Env").finish_non_exhaustive()
    }
}

/// An [`InvalidInput::Configuration`] error.
pub fn configuration(why: impl Into<String>) -> FenceError {
    InvalidInput::Configuration(why.into()).into()
}

/// URLs as shown to people (Debug, logs, errors): a password in a URL's user part replaced by
/// `***` (a user name alone, the Redis and PostgreSQL URL convention, is shown); comma-separated
/// URLs each.
///
/// ```
/// use fence_core::env::redact_url;
/// assert_eq!(redact_url("redis://app:s3cret@h:6379/0"), "redis://app:***@h:6379/0");
/// assert_eq!(redact_url("redis://:s3cret@a:1,redis://b:2"), "redis://:***@a:1,redis://b:2");
/// assert_eq!(redact_url("http://h:1/path@x"), "http://h:1/path@x");
/// // A user name alone (no password) is shown.
/// assert_eq!(redact_url("postgres://fence@h:5432/db"), "postgres://fence@h:5432/db");
/// ```
pub fn redact_url(urls: &str) -> String {
    let one = |url: &str| {
        let Some((scheme, rest)) = url.split_once("://") else {
            return url.to_owned();
        };
        let authority_end = rest.find('/').unwrap_or(rest.len());
        match rest[..authority_end].rfind('@') {
            // A user without a password is no secret: shown as it is.
            Some(at) => match rest[..at].split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***@{}", &rest[at + 1..]),
                None => url.to_owned(),
            },
            None => url.to_owned(),
        }
    };
    urls.split(',').map(one).collect::<Vec<_>>().join(",")
}

/// Comma-separated entries (seed nodes, endpoints), trimmed, empty ones dropped.
pub fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)] // a failed assertion in a test panics
mod tests {
    use super::*;

    fn invalid(result: Result<impl fmt::Debug, FenceError>) -> String {
        match result {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn empty_is_unset_and_values_never_reach_errors() {
        let env = Env::from_pairs([("A", ""), ("N", "not-a-number-s3cret")]);
        assert_eq!(env.get("A"), None);
        assert_eq!(invalid(env.require("A")), "A is not set");
        let why = invalid(env.parse::<u64>("N"));
        assert!(why.starts_with("N is not valid"), "{why}");
        assert!(!why.contains("s3cret"), "{why}");
        assert_eq!(env.parse::<u64>("A").ok(), Some(None));
        assert!(!format!("{env:?}").contains("s3cret"));
    }

    #[test]
    fn flags_take_the_usual_spellings_and_refuse_others() {
        let env = Env::from_pairs([("Y", "TRUE"), ("O", "on"), ("F", "0"), ("X", "maybe")]);
        assert_eq!(env.flag("Y").ok(), Some(true));
        assert_eq!(env.flag("O").ok(), Some(true));
        assert_eq!(env.flag("F").ok(), Some(false));
        assert_eq!(env.flag("unset").ok(), Some(false));
        assert!(invalid(env.flag("X")).contains("X must be"));
    }

    #[test]
    fn pairs_and_conflicts_are_named() {
        let env = Env::from_pairs([
            ("U", "u"),
            ("P", "p"),
            ("R1", "eu"),
            ("R2", "us"),
            ("R3", "eu "),
        ]);
        assert_eq!(
            env.both_or_neither("U", "P").ok(),
            Some(Some(("u".into(), "p".into())))
        );
        assert_eq!(invalid(env.both_or_neither("U", "Q")), "U is set without Q");
        assert_eq!(invalid(env.both_or_neither("Q", "P")), "P is set without Q");
        assert_eq!(env.both_or_neither("Q", "S").ok(), Some(None));
        assert_eq!(
            invalid(env.agreeing("R1", "R2")),
            "R1 and R2 are both set and disagree: set one"
        );
        assert_eq!(env.agreeing("R1", "R3").ok(), Some(Some("eu".into())));
        assert_eq!(env.agreeing("Q", "R2").ok(), Some(None));
        assert_eq!(
            invalid(env.one_of(&["Q", "U", "P"])),
            "U and P are both set: set one"
        );
    }

    #[test]
    fn defaults_answer_only_what_the_settings_leave_unset() {
        let env = Env::from_pairs([("A", "mine"), ("B", "")]).or_else(Env::from_pairs([
            ("A", "default"),
            ("B", "default"),
            ("C", "c"),
        ]));
        assert_eq!(env.get("A").as_deref(), Some("mine"));
        assert_eq!(env.get("B").as_deref(), Some("default"));
        assert_eq!(env.get("C").as_deref(), Some("c"));
    }

    #[test]
    fn token_bounds_settings() {
        let env = Env::from_pairs([(MAX_TOKEN_STEP, "0"), (ISSUED_ONLY, "1")]);
        assert_eq!(env.max_token_step().ok(), Some(None));
        assert!(invalid(env.refuse_issued_only("S3")).contains("S3 cannot see an issuer"));
        let env = Env::from_pairs([(MAX_TOKEN_STEP, "1000")]);
        assert_eq!(env.max_token_step().ok(), Some(NonZeroU64::new(1000)));
        assert!(env.refuse_issued_only("S3").is_ok());
        assert_eq!(list(" a, ,b,"), vec!["a".to_owned(), "b".to_owned()]);
    }
}
