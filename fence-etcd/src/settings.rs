//! The prefix's own admission settings (`<p>/settings`): bounds every fence under the prefix
//! obeys, whatever it was built with. Every write and claim reads the key with the domain's
//! folder and compares its `mod_revision` in the txn that writes, so a write is always decided
//! on the settings in force when it lands.

use std::num::NonZeroU64;

use etcd_client::KeyValue;
use fence_core::{BackendErrorKind, BoundsConfig, FenceError, FencingToken};

use crate::error::{kind_of, EtcdFenceError, BACKEND};
use crate::EtcdFence;

/// The settings key as read: the bounds it holds and its `mod_revision` (0: absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) bounds: BoundsConfig,
    pub(crate) version: i64,
}

impl Settings {
    /// The settings key as read (`kvs`: nothing, or the key), or why it is not Fence's.
    pub(crate) fn decode(kvs: &[KeyValue]) -> Result<Self, String> {
        let Some(kv) = kvs.first() else {
            return Ok(Settings::default());
        };
        let bounds = std::str::from_utf8(kv.value())
            .ok()
            .and_then(parse)
            .ok_or_else(|| {
                format!(
                    "settings key `{}` holds `{}`, not `max_step=<n|none> issued_only=<yes|no>`",
                    String::from_utf8_lossy(kv.key()),
                    String::from_utf8_lossy(kv.value())
                        .chars()
                        .take(80)
                        .collect::<String>()
                )
            })?;
        Ok(Settings {
            bounds,
            version: kv.mod_revision(),
        })
    }
}

/// The settings key's text: `max_step=<n|none> issued_only=<yes|no>`.
fn encode(bounds: BoundsConfig) -> String {
    format!(
        "max_step={} issued_only={}",
        bounds
            .max_step
            .map_or_else(|| "none".to_owned(), |step| step.to_string()),
        if bounds.issued_only { "yes" } else { "no" }
    )
}

fn parse(text: &str) -> Option<BoundsConfig> {
    let (step, issued) = text.split_once(' ')?;
    let max_step = match step.strip_prefix("max_step=")? {
        "none" => None,
        // A canonical token (FORMATS.md §1.1): what `encode` writes.
        token => Some(NonZeroU64::new(token.parse::<FencingToken>().ok()?.get())?),
    };
    let issued_only = match issued.strip_prefix("issued_only=")? {
        "yes" => true,
        "no" => false,
        _ => return None,
    };
    Some(BoundsConfig::new(max_step, issued_only))
}

impl EtcdFence {
    /// Stores `bounds` under the prefix, replacing what was stored: from then on every write
    /// and claim of every fence under the prefix — including one built without
    /// [`crate::EtcdFenceBuilder::max_token_step`] or [`crate::EtcdFenceBuilder::issued_only`] —
    /// refuses what they refuse. Each write's txn compares the settings key, so none lands decided on settings
    /// that changed meanwhile. A fence's own settings still apply: the tighter of the two wins.
    /// [`BoundsConfig::NONE`] removes the key.
    pub async fn set_resource_bounds(&self, bounds: BoundsConfig) -> Result<(), FenceError> {
        let key = self.etcd().keys().settings();
        let mut kv = self.etcd().etcd_client().kv_client();
        let done = if bounds == BoundsConfig::NONE {
            kv.delete(key, None).await.map(|_| ())
        } else {
            kv.put(key, encode(bounds), None).await.map(|_| ())
        };
        done.map_err(client_error)
    }

    /// The settings stored under the prefix ([`BoundsConfig::NONE`] when none are).
    pub async fn resource_bounds(&self) -> Result<BoundsConfig, FenceError> {
        let response = self
            .etcd()
            .etcd_client()
            .kv_client()
            .get(self.etcd().keys().settings(), None)
            .await
            .map_err(client_error)?;
        let settings = Settings::decode(response.kvs()).map_err(|why| {
            FenceError::backend(
                BACKEND,
                BackendErrorKind::Rejected,
                None,
                EtcdFenceError::Settings {
                    key: self.etcd().keys().settings(),
                    why,
                },
            )
        })?;
        Ok(settings.bounds)
    }
}

/// A client error of an operator's call on the settings (it concerns no domain; storing is
/// idempotent, so a lost answer is retried, not guessed).
fn client_error(error: etcd_client::Error) -> FenceError {
    FenceError::backend(
        BACKEND,
        kind_of(&error),
        None,
        EtcdFenceError::Client(error),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_round_trips_and_anything_else_is_refused() {
        for bounds in [
            BoundsConfig::NONE,
            BoundsConfig::new(NonZeroU64::new(1), false),
            BoundsConfig::new(NonZeroU64::new(u64::MAX), true),
            BoundsConfig::new(None, true),
        ] {
            assert_eq!(parse(&encode(bounds)), Some(bounds), "{}", encode(bounds));
        }
        for bad in [
            "",
            "max_step=0 issued_only=no",
            "max_step=010 issued_only=no",
            "max_step=18446744073709551616 issued_only=no",
            "max_step=none issued_only=true",
            "max_step=none  issued_only=no",
            "max_step=+5 issued_only=no",
            "issued_only=no max_step=none",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
