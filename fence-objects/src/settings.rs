//! The settings every object fence reads from the environment under its own variable names
//! (`FENCE_S3_PREFIX`, `FENCE_OBJECT_STORE_PREFIX`, …): read and validated once, here.

use std::num::NonZeroU64;

use fence_core::env::{configuration, Env};
use fence_core::FenceError;

use crate::{KeyLayout, MAX_OP_ID_RETENTION};

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

/// Checks the limits every object fence's builder takes: at least one compare-and-swap attempt,
/// a positive payload bound, at most [`MAX_OP_ID_RETENTION`] remembered operation ids.
pub fn check_limits(
    max_attempts: u64,
    max_value_bytes: usize,
    op_id_retention: usize,
) -> Result<(), FenceError> {
    if max_attempts == 0 {
        return Err(configuration("max_attempts must be at least 1"));
    }
    if max_value_bytes == 0 || op_id_retention > MAX_OP_ID_RETENTION {
        return Err(configuration(format!(
            "max_value_bytes must be positive and op_id_retention at most {MAX_OP_ID_RETENTION}"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)] // a failed test panics
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Recorded {
        prefix: Option<String>,
        layout: Option<KeyLayout>,
        step: Option<NonZeroU64>,
    }

    impl ObjectFenceBuilder for Recorded {
        fn with_prefix(mut self, prefix: String) -> Self {
            self.prefix = Some(prefix);
            self
        }
        fn with_key_layout(mut self, layout: KeyLayout) -> Self {
            self.layout = Some(layout);
            self
        }
        fn with_max_token_step(mut self, max_step: NonZeroU64) -> Self {
            self.step = Some(max_step);
            self
        }
    }

    const NAMES: SettingNames = SettingNames {
        prefix: "P",
        key_layout: "L",
    };

    #[test]
    fn the_settings_set_reach_the_builder_and_a_bad_layout_names_its_variable() {
        let env = Env::from_pairs([
            ("P", "t/"),
            ("L", " verbatim "),
            ("FENCE_MAX_TOKEN_STEP", "9"),
        ]);
        let built = apply_env(&env, NAMES, Recorded::default()).unwrap();
        assert_eq!(built.prefix.as_deref(), Some("t/"));
        assert_eq!(built.layout, Some(KeyLayout::Verbatim));
        assert_eq!(built.step, NonZeroU64::new(9));
        let unset = apply_env(&Env::from_pairs([("X", "1")]), NAMES, Recorded::default());
        assert_eq!(unset.unwrap(), Recorded::default());
        let bad = apply_env(
            &Env::from_pairs([("L", "flat")]),
            NAMES,
            Recorded::default(),
        );
        assert!(bad.unwrap_err().to_string().contains("L must be"));
    }

    #[test]
    fn limits_outside_their_bounds_are_refused() {
        assert!(check_limits(1, 1, MAX_OP_ID_RETENTION).is_ok());
        assert!(check_limits(0, 1, 0).is_err());
        assert!(check_limits(1, 0, 0).is_err());
        assert!(check_limits(1, 1, MAX_OP_ID_RETENTION + 1).is_err());
    }
}
