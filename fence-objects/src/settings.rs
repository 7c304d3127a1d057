//! The settings every object fence reads from the environment under its own variable names
//! (`FENCE_S3_PREFIX`, `FENCE_OBJECT_STORE_PREFIX`, …): read and validated once, here.

use std::num::NonZeroU64;

use fence_core::env::{configuration, Env};
use fence_core::FenceError;

use crate::KeyLayout;

/// A builder of an object fence, as [`apply_env`] configures it.
pub trait ObjectFenceBuilder: Sized {
    /// Sets the key prefix.
    fn with_prefix(self, prefix: String) -> Self;
    /// Sets the key layout.
    fn with_key_layout(self, layout: KeyLayout) -> Self;
    /// Sets the bound on how far above a mark a token may go.
    fn with_max_token_step(self, max_step: NonZeroU64) -> Self;
}

/// Implements [`ObjectFenceBuilder`] for a builder whose own `prefix`, `key_layout` and
/// `max_token_step` methods set these (fence-s3's and fence-object-store's builders).
#[macro_export]
macro_rules! object_fence_builder {
    ($builder:ty) => {
        impl $crate::settings::ObjectFenceBuilder for $builder {
            fn with_prefix(self, prefix: String) -> Self {
                self.prefix(prefix)
            }

            fn with_key_layout(self, layout: $crate::KeyLayout) -> Self {
                self.key_layout(layout)
            }

            fn with_max_token_step(self, max_step: ::std::num::NonZeroU64) -> Self {
                self.max_token_step(max_step)
            }
        }
    };
}

/// The names of one fence's variables.
#[derive(Clone, Copy, Debug)]
pub struct SettingNames {
    /// The key prefix's variable.
    pub prefix: &'static str,
    /// The key layout's variable (`escaped` or `verbatim`).
    pub key_layout: &'static str,
}

/// Applies the prefix, the key layout and `FENCE_MAX_TOKEN_STEP` that `env` sets to `builder`;
/// a layout that is neither `escaped` nor `verbatim` is a configuration error naming its
/// variable.
pub fn apply_env<B: ObjectFenceBuilder>(
    env: &Env,
    names: SettingNames,
    mut builder: B,
) -> Result<B, FenceError> {
    if let Some(prefix) = env.get(names.prefix) {
        builder = builder.with_prefix(prefix);
    }
    if let Some(layout) = env.get(names.key_layout) {
        let layout = KeyLayout::from_name(&layout).ok_or_else(|| {
            configuration(format!(
                "{} must be `escaped` or `verbatim`",
                names.key_layout
            ))
        })?;
        builder = builder.with_key_layout(layout);
    }
    if let Some(step) = env.max_token_step()? {
        builder = builder.with_max_token_step(step);
    }
    Ok(builder)
}
