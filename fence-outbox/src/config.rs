//! Outbox limits and partitioning, shared by writers and relays.

use fence_core::Domain;

use crate::effect::{Effect, EffectKinds};
use crate::error::OutboxError;

/// The default greatest payload size: 64 KiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// The default greatest number of effects per transition.
pub const DEFAULT_MAX_EFFECTS: usize = 16;

/// What an outbox accepts and how its domains are split among relays. Writers and relays of
/// one outbox must agree on `partitions`.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OutboxConfig {
    /// The accepted effect kinds.
    pub kinds: EffectKinds,
    /// The greatest payload size of one effect.
    pub max_payload_bytes: usize,
    /// The greatest number of effects in one transition.
    pub max_effects: usize,
    /// How many partitions (one relay each) the domains are spread over.
    pub partitions: u16,
}

impl OutboxConfig {
    /// Defaults: 64 KiB payloads, 16 effects per transition, one partition.
    pub fn new(kinds: EffectKinds) -> Self {
        OutboxConfig {
            kinds,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            max_effects: DEFAULT_MAX_EFFECTS,
            partitions: 1,
        }
    }

    /// Sets the greatest payload size.
    pub fn max_payload_bytes(mut self, max: usize) -> Self {
        self.max_payload_bytes = max;
        self
    }

    /// Sets the greatest number of effects per transition.
    pub fn max_effects(mut self, max: usize) -> Self {
        self.max_effects = max;
        self
    }

    /// Sets the number of partitions (at least 1).
    pub fn partitions(mut self, partitions: u16) -> Self {
        self.partitions = partitions.max(1);
        self
    }

    /// The partition of `domain`: FNV-1a of its bytes, stable across versions and machines.
    pub fn partition_of(&self, domain: &Domain) -> u16 {
        (fnv1a_32(domain.as_str()) % u32::from(self.partitions.max(1))) as u16
    }

    /// Checks a transition's effects against the kinds and limits, before any I/O.
    pub fn check_effects(&self, domain: &Domain, effects: &[Effect]) -> Result<(), OutboxError> {
        if effects.len() > self.max_effects {
            return Err(OutboxError::TooManyEffects {
                domain: domain.clone(),
                count: effects.len(),
                max: self.max_effects,
            });
        }
        for (index, effect) in effects.iter().enumerate() {
            self.kinds.check(domain, effect)?;
            if effect.payload().len() > self.max_payload_bytes {
                return Err(OutboxError::PayloadTooLarge {
                    domain: domain.clone(),
                    index,
                    size: effect.payload().len(),
                    max: self.max_payload_bytes,
                });
            }
        }
        Ok(())
    }
}

/// FNV-1a 32 of `text`'s bytes (FORMATS.md §1.8).
fn fnv1a_32(text: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_the_fnv1a_32_vectors_of_formats_md() {
        for (domain, hash) in [
            ("a", 0xe40c_292c),
            ("orders", 0x325e_96ec),
            ("customer-42", 0xfe68_adbe),
            ("order/42", 0x6ccb_ed52),
        ] {
            assert_eq!(fnv1a_32(domain), hash, "{domain}");
        }
    }

    #[test]
    fn partitions_match_the_fnv1a_32_vectors_of_formats_md() {
        // FORMATS.md §1.8: the same values a reader in another language must compute.
        let config = OutboxConfig::new(EffectKinds::new()).partitions(4);
        for (domain, partition) in [("orders", 0), ("customer-42", 2), ("order/42", 2)] {
            let domain = Domain::new(domain).unwrap_or_else(|e| unreachable!("{e}"));
            assert_eq!(config.partition_of(&domain), partition, "{domain}");
        }
    }
}
