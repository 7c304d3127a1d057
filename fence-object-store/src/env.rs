//! The environment variables [`ObjectStoreFenceBuilder::from_env`] reads, and opening a store
//! from a URL through object_store's own builders.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_OBJECT_STORE_URL` | the bucket or container, as object_store spells it: `s3://bucket`, `az://container`, `gs://bucket`, `memory:///` (required) |
//! | `FENCE_OBJECT_STORE_PREFIX` | key prefix of the fenced objects (default `fence/`) |
//! | `FENCE_OBJECT_STORE_KEY_LAYOUT` | `escaped` (default) or `verbatim` (see [`KeyLayout`](crate::KeyLayout)) |
//! | `FENCE_MAX_TOKEN_STEP` | refuse tokens more than this above an object's mark |
//!
//! Everything else about the store (credentials, endpoint, region, emulator) is object_store's
//! own configuration, read by its builders' `from_env`: `AWS_*` for `s3://`, `AZURE_*` (and
//! `AZURITE_BLOB_STORAGE_URL` with `AZURE_STORAGE_USE_EMULATOR=true`) for `az://`, `GOOGLE_*`
//! for `gs://`. Each cloud needs this crate's feature of the same name (`aws`, `azure`, `gcp`).
//! Stores built here have object_store's own retries turned off (`max_retries: 0`): a
//! conditional write it resent after a lost answer could be refused although the first send
//! applied, and reported as refused. Without resends every answer is exact, but a momentary
//! server error, throttling (429, 503) or a cut connection is returned at once: as
//! `Unavailable` (retryable: retry the call, with backoff) or, for a write whose answer was
//! lost, `Ambiguous`. Fence's own compare-and-swap loop retries only writes lost to
//! concurrent writers. Build the store yourself (with your `RetryConfig`) and pass it to
//! [`ObjectStoreFence::builder`] to choose otherwise.
//! A URL with a path after the bucket is refused (the prefix is set on its own, so that it
//! means the same here as in fence-s3), and so are `file://` (object_store's `LocalFileSystem`
//! cannot compare-and-swap) and plain HTTP stores. `FENCE_ISSUED_ONLY` is refused: an object
//! store cannot see an issuer.

use std::sync::Arc;

use fence_core::env::{configuration, Env};
use fence_core::FenceError;
use fence_objects::settings::{apply_env, SettingNames};
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreScheme};
use url::Url;

use crate::{ObjectStoreFence, ObjectStoreFenceBuilder};

/// The store's URL.
pub const URL: &str = "FENCE_OBJECT_STORE_URL";
/// The key prefix.
pub const PREFIX: &str = "FENCE_OBJECT_STORE_PREFIX";
/// `escaped` or `verbatim`.
pub const KEY_LAYOUT: &str = "FENCE_OBJECT_STORE_KEY_LAYOUT";

/// Where a store's own settings come from (read only by the cloud builders).
#[cfg_attr(
    not(any(feature = "aws", feature = "azure", feature = "gcp")),
    allow(dead_code)
)]
enum Settings<'a> {
    /// object_store's builders read the process environment (`from_env`).
    Process,
    /// These `(key, value)` pairs, in object_store's configuration keys
    /// (`aws_endpoint`, `azure_storage_account_name`, `google_service_account`, …).
    Pairs(&'a [(String, String)]),
}

impl ObjectStoreFenceBuilder {
    /// A builder configured from the process environment: see [`crate::env`] for the
    /// variables. Settings made afterwards on the builder override them.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), fence_core::FenceError> {
    /// // FENCE_OBJECT_STORE_URL=az://tables, with AZURE_STORAGE_ACCOUNT_NAME and a credential.
    /// let fence = fence_object_store::ObjectStoreFenceBuilder::from_env()?.connect().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process())
    }

    /// A builder whose `FENCE_OBJECT_STORE_*` settings come from `env`; the store's own
    /// settings are still read by object_store's builders from the process environment.
    ///
    /// ```
    /// use fence_core::env::Env;
    /// use fence_object_store::{env, ObjectStoreFenceBuilder};
    ///
    /// let env = Env::from_pairs([(env::URL, "memory:///"), (env::PREFIX, "tables/")]);
    /// let fence = ObjectStoreFenceBuilder::from_env_with(&env)?.build()?;
    /// assert_eq!(fence.prefix(), "tables/");
    /// # Ok::<(), fence_core::FenceError>(())
    /// ```
    pub fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        env.refuse_issued_only("an object store")?;
        let url = env.require(URL)?;
        let store = open(&url, Settings::Process)?;
        let names = SettingNames {
            prefix: PREFIX,
            key_layout: KEY_LAYOUT,
        };
        apply_env(env, names, ObjectStoreFence::builder(store))
    }
}

fence_objects::object_fence_builder!(ObjectStoreFenceBuilder);

/// The store a URL names (`s3://bucket`, `az://container`, `gs://bucket`, `memory:///`),
/// configured by object_store's builder with `options` (its configuration keys, e.g.
/// `("azure_storage_account_name", "…")`); an unknown key is refused. See [`crate::env`] for
/// which URLs are refused.
///
/// ```
/// let store = fence_object_store::env::store_from_url("memory:///", std::iter::empty::<(String, String)>())?;
/// assert_eq!(store.to_string(), "InMemory");
/// let local = fence_object_store::env::store_from_url("file:///tmp/tables", std::iter::empty::<(String, String)>());
/// assert!(local.is_err());
/// # Ok::<(), fence_core::FenceError>(())
/// ```
pub fn store_from_url(
    url: &str,
    options: impl IntoIterator<Item = (String, String)>,
) -> Result<Arc<dyn ObjectStore>, FenceError> {
    let pairs: Vec<(String, String)> = options.into_iter().collect();
    open(url, Settings::Pairs(&pairs))
}

/// Opens the store `url` names; errors show the URL without its query and fragment (a SAS
/// token's signature) and without a password.
fn open(url: &str, settings: Settings<'_>) -> Result<Arc<dyn ObjectStore>, FenceError> {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    let shown = fence_core::env::redact_url(without_query);
    let parsed = Url::parse(url).map_err(|e| configuration(format!("{URL} `{shown}`: {e}")))?;
    let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|_| {
        configuration(format!(
            "{URL} `{shown}`: not a store URL object_store recognises (s3://, az://, gs://, memory:///)"
        ))
    })?;
    let refuse = |why: &str| Err(configuration(format!("{URL} `{shown}`: {why}")));
    match scheme {
        ObjectStoreScheme::Local => {
            return refuse("object_store's LocalFileSystem can create an object only if absent but cannot replace it only if unchanged, so it cannot fence")
        }
        ObjectStoreScheme::Http => {
            return refuse("a plain HTTP (WebDAV) store has no conditional update to fence with")
        }
        _ if !path.as_ref().is_empty() => {
            return refuse(&format!(
                "name only the bucket or container; set the key prefix with {PREFIX}"
            ))
        }
        ObjectStoreScheme::Memory => return Ok(Arc::new(InMemory::new())),
        _ => {}
    }
    cloud(&scheme, url, &shown, settings)
}

/// Builds a cloud store with its builder: `from_env` or the pairs, then the URL.
#[cfg_attr(
    not(any(feature = "aws", feature = "azure", feature = "gcp")),
    allow(unused_macros)
)]
macro_rules! build_with {
    ($builder:ty, $url:expr, $shown:expr, $settings:expr) => {{
        let builder = match $settings {
            Settings::Process => <$builder>::from_env(),
            Settings::Pairs(pairs) => {
                let mut builder = <$builder>::new();
                for (key, value) in pairs {
                    let parsed = key.to_ascii_lowercase().parse().map_err(|_| {
                        configuration(format!(
                            "`{key}` is not an object_store setting of {}",
                            $shown
                        ))
                    })?;
                    builder = builder.with_config(parsed, value.clone());
                }
                builder
            }
        };
        let store = builder
            .with_url($url)
            // A conditional put that object_store resent after a lost answer can be refused
            // although its first send applied; without resends every answer is exact, and
            // Fence's own loop retries what a retry can mend.
            .with_retry(object_store::RetryConfig {
                max_retries: 0,
                ..object_store::RetryConfig::default()
            })
            .build()
            .map_err(|e| {
                configuration(format!(
                    "{}: {}",
                    $shown,
                    scrub(&e.to_string(), $url, $shown)
                ))
            })?;
        Ok(Arc::new(store) as Arc<dyn ObjectStore>)
    }};
}

/// `text` (an object_store error) with the URL it may quote replaced by its shown form.
#[cfg_attr(
    not(any(feature = "aws", feature = "azure", feature = "gcp")),
    allow(dead_code)
)]
fn scrub(text: &str, url: &str, shown: &str) -> String {
    let scrubbed = text.replace(url, shown);
    match url.find(['?', '#']) {
        Some(at) => scrubbed.replace(&url[at..], ""),
        None => scrubbed,
    }
}

#[allow(unused_variables)] // without any cloud feature only the refusal uses them
fn cloud(
    scheme: &ObjectStoreScheme,
    url: &str,
    shown: &str,
    settings: Settings<'_>,
) -> Result<Arc<dyn ObjectStore>, FenceError> {
    let missing = |feature: &str| -> Result<Arc<dyn ObjectStore>, FenceError> {
        Err(configuration(format!(
            "{URL} `{shown}` needs fence-object-store's `{feature}` feature"
        )))
    };
    match scheme {
        #[cfg(feature = "aws")]
        ObjectStoreScheme::AmazonS3 => {
            build_with!(object_store::aws::AmazonS3Builder, url, shown, settings)
        }
        #[cfg(not(feature = "aws"))]
        ObjectStoreScheme::AmazonS3 => missing("aws"),
        #[cfg(feature = "azure")]
        ObjectStoreScheme::MicrosoftAzure => {
            build_with!(
                object_store::azure::MicrosoftAzureBuilder,
                url,
                shown,
                settings
            )
        }
        #[cfg(not(feature = "azure"))]
        ObjectStoreScheme::MicrosoftAzure => missing("azure"),
        #[cfg(feature = "gcp")]
        ObjectStoreScheme::GoogleCloudStorage => build_with!(
            object_store::gcp::GoogleCloudStorageBuilder,
            url,
            shown,
            settings
        ),
        #[cfg(not(feature = "gcp"))]
        ObjectStoreScheme::GoogleCloudStorage => missing("gcp"),
        _ => Err(configuration(format!(
            "{URL} `{shown}`: not an object store fence-object-store knows"
        ))),
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // a failed test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    fn refused(url: &str, pairs: &[(&str, &str)]) -> String {
        let pairs = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        match store_from_url(url, pairs) {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            Err(other) => panic!("expected a configuration error for {url}, got {other}"),
            Ok(store) => panic!("expected {url} to be refused, got {store}"),
        }
    }

    #[test]
    fn a_refused_url_is_shown_without_its_query_or_password() {
        let why = refused(
            "https://acct.blob.core.windows.net/c/tables?sv=1&sig=SECRET",
            &[],
        );
        assert!(
            !why.contains("SECRET") && why.contains("acct.blob"),
            "{why}"
        );
        let why = refused("memory://user:SECRET@host/x?sig=SECRET", &[]);
        assert!(!why.contains("SECRET"), "{why}");
    }

    #[test]
    fn urls_that_cannot_fence_or_that_carry_a_path_are_refused() {
        assert!(refused("file:///tmp/tables", &[]).contains("LocalFileSystem"));
        assert!(refused("https://example.com/dav", &[]).contains("HTTP"));
        assert!(refused("memory:///tables", &[]).contains(PREFIX));
        assert!(refused("not a url", &[]).contains(URL));
        assert!(refused("ftp://host/x", &[]).contains(URL));
    }

    #[cfg(feature = "azure")]
    #[test]
    fn an_unknown_setting_is_refused_and_a_known_one_builds_the_store() {
        let why = refused("az://tables", &[("azure_storage_acount_name", "x")]);
        assert!(why.contains("azure_storage_acount_name"), "{why}");
        let store = store_from_url(
            "az://tables",
            [("azure_storage_use_emulator".to_owned(), "true".to_owned())],
        )
        .expect("an emulator client");
        assert!(store.to_string().contains("tables"), "{store}");
    }

    #[test]
    fn the_fence_settings_are_read_and_issued_only_is_refused() {
        let env = Env::from_pairs([(URL, "memory:///"), (KEY_LAYOUT, "sideways")]);
        let why = ObjectStoreFenceBuilder::from_env_with(&env).unwrap_err();
        assert!(why.to_string().contains(KEY_LAYOUT), "{why}");
        let env = Env::from_pairs([(URL, "memory:///"), (fence_core::env::ISSUED_ONLY, "1")]);
        assert!(ObjectStoreFenceBuilder::from_env_with(&env).is_err());
        let env = Env::from_pairs([(URL, "memory:///"), (PREFIX, "/bad")]);
        let built = ObjectStoreFenceBuilder::from_env_with(&env).and_then(|b| b.build());
        assert!(
            built.is_err(),
            "the prefix reaches the builder's validation"
        );
        let env = Env::from_pairs([(URL, "memory:///"), (PREFIX, "tables/")]);
        let fence = ObjectStoreFenceBuilder::from_env_with(&env)
            .and_then(ObjectStoreFenceBuilder::build)
            .expect("a fence");
        assert_eq!(fence.prefix(), "tables/");
    }
}
