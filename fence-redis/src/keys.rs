//! The key layout. Every key of a domain shares the hash tag `{<escaped domain>}`, so every
//! script touches one slot and runs unchanged on Redis Cluster.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `<prefix>:{<domain>}:state` | hash | `fence`=1, `hwm`, `rev`, `tok`, `state` (v/t), `val` |
//! | `<prefix>:{<domain>}:op:<token>:<op id>` | string, PX retention | first outcome of an operation id |
//! | `<prefix>:{<domain>}:seq` | string | last issued token (never expires, never reset) |
//! | `<prefix>:{<domain>}:lease` | hash, PX ttl | `owner`, `token` |
//! | `<prefix>:{<domain>}:rebases` | list | operators' re-bases, one line each (see `RedisFence::rebase`) |
//! | `<prefix>:{<domain>}:bounds` | hash | the domain's own admission settings: `max_step`, `issued_only` (see `RedisFence::set_domain_bounds`) |
//! | `<prefix>:{<domain>}:u:<name>` | any | keys of fenced user scripts |

use fence_core::{Domain, FencingToken, InvalidInput, OperationId};

/// The Redis ACL command rules a fence's user needs, besides the key pattern `~<prefix>:*`:
/// every command its scripts call (Redis checks ACLs on each call inside a script), `EVALSHA`
/// and `EVAL` to run them, `PING` to connect, `ROLE` for the master check behind Sentinel,
/// `WAIT` for [`crate::RedisFenceBuilder::wait_for_replicas`], `LRANGE` for re-base records, and
/// `CLUSTER SLOTS`/`CLUSTER SHARDS`/`ASKING` for a cluster client's slot map and redirects (the client's
/// `CLIENT SETINFO` on connecting may be refused: its answer is ignored). Fenced user scripts
/// need the commands they call added. Tested on standalone Redis by creating a user with
/// exactly these.
///
/// ```text
/// ACL SETUSER worker on >secret resetkeys ~billing:* resetchannels -@all <FENCE_ACL_COMMANDS>
/// ```
pub const FENCE_ACL_COMMANDS: &str = "+evalsha +eval +ping +role +wait +lrange +type +exists \
     +get +set +del +hget +hmget +hgetall +hset +hdel +pttl +pexpire +rpush +time +cluster|slots \
     +cluster|shards +asking";

/// The Redis ACL command rules retirement needs besides [`FENCE_ACL_COMMANDS`]
/// (`fence retire redis`, `Retirer::retire`): `SCAN` to find a domain's keys, and
/// `CLUSTER NODES` to find every master of a cluster. An operator's user needs them; a worker's
/// should not have them (`SCAN` lists key names beyond the user's key pattern).
pub const RETIRE_ACL_COMMANDS: &str = "+scan +cluster|nodes";

/// The greatest length of a key prefix.
pub const MAX_PREFIX_BYTES: usize = 64;
/// The greatest length of a user key name.
pub const MAX_USER_KEY_BYTES: usize = 256;

/// Builds key names under a validated prefix.
#[derive(Clone, Debug)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Result<Self, InvalidInput> {
        let bad = prefix.is_empty()
            || prefix.len() > MAX_PREFIX_BYTES
            || prefix
                .chars()
                .any(|c| c.is_control() || c.is_whitespace() || c == '{' || c == '}');
        if bad {
            return Err(InvalidInput::Configuration(format!(
                "redis key prefix `{}` must be 1 to {MAX_PREFIX_BYTES} bytes without braces, spaces or control characters",
                prefix.escape_debug()
            )));
        }
        Ok(Keys {
            prefix: prefix.to_owned(),
        })
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    fn tagged(&self, domain: &Domain, suffix: &str) -> String {
        format!("{}:{{{}}}:{suffix}", self.prefix, domain.escaped())
    }

    /// What every key of `domain` starts with: `<prefix>:{<escaped domain>}:`.
    pub(crate) fn domain_keys(&self, domain: &Domain) -> String {
        self.tagged(domain, "")
    }

    pub(crate) fn state(&self, domain: &Domain) -> String {
        self.tagged(domain, "state")
    }

    /// The op-id key, or a same-slot placeholder the script never touches.
    pub(crate) fn op(
        &self,
        domain: &Domain,
        token: FencingToken,
        op: Option<&OperationId>,
    ) -> String {
        match op {
            Some(op) => self.tagged(domain, &format!("op:{token}:{}", op.escaped())),
            None => self.tagged(domain, "op"),
        }
    }

    /// What every op-id key of `domain` starts with.
    pub(crate) fn ops_prefix(&self, domain: &Domain) -> String {
        self.tagged(domain, "op:")
    }

    pub(crate) fn sequence(&self, domain: &Domain) -> String {
        self.tagged(domain, "seq")
    }

    pub(crate) fn rebases(&self, domain: &Domain) -> String {
        self.tagged(domain, "rebases")
    }

    pub(crate) fn bounds(&self, domain: &Domain) -> String {
        self.tagged(domain, "bounds")
    }

    pub(crate) fn lease(&self, domain: &Domain) -> String {
        self.tagged(domain, "lease")
    }

    pub(crate) fn user(&self, domain: &Domain, name: &str) -> Result<String, InvalidInput> {
        const WHAT: &str = "script key name";
        if name.is_empty() {
            return Err(InvalidInput::EmptyIdentifier { what: WHAT });
        }
        if name.len() > MAX_USER_KEY_BYTES {
            return Err(InvalidInput::IdentifierTooLong {
                what: WHAT,
                len: name.len(),
                max: MAX_USER_KEY_BYTES,
            });
        }
        if let Some((position, _)) = name.char_indices().find(|(_, c)| c.is_control()) {
            return Err(InvalidInput::IdentifierControlCharacter {
                what: WHAT,
                position,
            });
        }
        Ok(self.tagged(domain, &format!("u:{name}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_domain_shares_one_slot() -> Result<(), InvalidInput> {
        let keys = Keys::new("fence")?;
        let d = Domain::new("a{b}c:d")?;
        let t = FencingToken::new(7)?;
        let all = [
            keys.state(&d),
            keys.op(&d, t, Some(&OperationId::new("x{y}")?)),
            keys.op(&d, t, None),
            keys.sequence(&d),
            keys.lease(&d),
            keys.rebases(&d),
            keys.bounds(&d),
            keys.user(&d, "orders{1}")?,
        ];
        let slot = redis::cluster_routing::Slot::for_key(&all[0]);
        for key in &all {
            assert_eq!(redis::cluster_routing::Slot::for_key(key), slot, "{key}");
            assert!(key.starts_with("fence:{a%7Bb%7Dc%3Ad}:"), "{key}");
        }
        Ok(())
    }

    #[test]
    fn prefixes_that_would_break_the_hash_tag_are_refused() {
        for bad in ["", "a{b", "a}b", "a b", "a\nb", &"p".repeat(65)] {
            assert!(Keys::new(bad).is_err(), "{bad:?}");
        }
        assert!(Keys::new("tenant-1:fence").is_ok());
    }
}
