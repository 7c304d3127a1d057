//! Bringing keys another tool wrote under fencing, explicitly, as `fence-s3`'s `adopt` does for
//! objects: one fenced script (the token rule and admission first, like any write) checks the
//! key and moves it into the domain, so no write to it can slip in between.

use fence_core::raw::observe;
use fence_core::{
    Accepted, Claimed, Domain, EqualTokenPolicy, FenceError, FencingToken, InvalidInput, OpKind,
    Operation, Revision,
};
use redis::{ErrorKind, ServerErrorKind};

use crate::envelope::{Answer, Envelope};
use crate::error::{backend_error, unexpected, RedisFenceError, BACKEND};
use crate::fence::RedisFence;
use crate::scripts::ADOPT;

impl RedisFence {
    /// Brings the plain string at `key` (written by another tool) under fencing as `domain`'s
    /// value, with `token`: in one script, the token rule and the configured bounds apply as
    /// for a write, then the string becomes the value at revision 1, the mark becomes `token`,
    /// and `key` is deleted, so a tool still writing it recreates a key Fence never reads
    /// (point it at Fence first). Refused, with nothing changed, when `key` is missing, is not a
    /// string (a hash: see [`RedisFence::adopt_key`]), is larger than the configured
    /// `max_value_bytes`, or the domain already holds an entry.
    ///
    /// On Redis Cluster `key` must be in the domain's hash slot (its name holds the domain's
    /// hash tag, `{<escaped domain>}`): a script cannot move a key across slots. Adopting needs
    /// commands and keys a fenced worker does not: run it as an operator (`+type +strlen +get
    /// +del +rename` on `key` as well as the fence's prefix).
    pub async fn adopt_value(
        &self,
        domain: &Domain,
        token: FencingToken,
        key: &str,
    ) -> Result<Accepted, FenceError> {
        observe(BACKEND, Operation::Write, domain, Some(token), async {
            self.check_foreign(key)?;
            let max = self.inner.max_value_bytes.to_string();
            let keys = [self.inner.keys.state(domain), key.to_owned()];
            let args: [&[u8]; 2] = [b"value", max.as_bytes()];
            match self.adopt(domain, token, key, keys, &args).await? {
                Some(previous) => Ok(Accepted::new(token, Revision::new(1), previous)),
                None => Err(unexpected("adopt", domain, "no previous mark")),
            }
        })
        .await
    }

    /// Brings `key` (of any type: a hash, a list, a string...) under fencing as `domain`'s user
    /// key `name` ([`RedisFence::user_key`]), with `token`: in one script, the token rule and
    /// the configured bounds apply as for a claim, the mark becomes `token`, and `key` is
    /// renamed to the user key, which fenced scripts ([`RedisFence::run_script`]) change from
    /// then on. Refused, with nothing changed, when `key` is missing or the user key exists.
    /// The same Cluster and permission notes as [`RedisFence::adopt_value`] apply.
    pub async fn adopt_key(
        &self,
        domain: &Domain,
        token: FencingToken,
        key: &str,
        name: &str,
    ) -> Result<Claimed, FenceError> {
        observe(BACKEND, Operation::Write, domain, Some(token), async {
            self.check_foreign(key)?;
            let target = self.user_key(domain, name)?;
            let keys = [self.inner.keys.state(domain), key.to_owned(), target];
            let args: [&[u8]; 2] = [b"key", b""];
            match self.adopt(domain, token, key, keys, &args).await? {
                Some(previous) => Ok(Claimed::new(token, previous)),
                None => Err(unexpected("adopt", domain, "no previous mark")),
            }
        })
        .await
    }

    /// A key under the fence's prefix is Fence's own state, never another tool's.
    fn check_foreign(&self, key: &str) -> Result<(), FenceError> {
        let own = format!("{}:", self.inner.keys.prefix());
        if key.is_empty() || key.starts_with(&own) {
            return Err(InvalidInput::InvalidKey {
                backend: BACKEND,
                key: key.chars().take(120).collect(),
                reason: "keys under the fence's prefix are its own state, not another tool's",
            }
            .into());
        }
        Ok(())
    }

    /// Runs the adopt script; `Some(previous mark)` once it applied.
    async fn adopt(
        &self,
        domain: &Domain,
        token: FencingToken,
        key: &str,
        keys: impl IntoIterator<Item = String>,
        args: &[&[u8]],
    ) -> Result<Option<Option<FencingToken>>, FenceError> {
        let call = Envelope {
            domain,
            token,
            policy: EqualTokenPolicy::SameOwner,
            op_id: None,
            kind: OpKind::Write,
            operation: Operation::Write,
        };
        let refused = |reason: String| {
            Err(backend_error(
                Some(domain),
                RedisFenceError::AdoptRefused {
                    key: key.to_owned(),
                    reason,
                },
            ))
        };
        let (answer, waited) = match self.run_fenced(&ADOPT, &call, keys, args).await {
            Ok(answered) => answered,
            Err(error) if cross_slot(&error) => {
                return refused(format!(
                    "on Redis Cluster it must be in the hash slot of domain `{domain}` (a name holding `{{{}}}`); copy it there first",
                    domain.escaped()
                ))
            }
            Err(error) => return Err(error),
        };
        let reply = match answer {
            Answer::Applied { previous, .. } => {
                self.replicas(domain, Operation::Write, waited)?;
                return Ok(Some(previous));
            }
            Answer::Replayed { .. } => return Err(unexpected("adopt", domain, "a replay")),
            Answer::Refused(reply) => reply,
        };
        match reply.tag.as_str() {
            "no_source" => Err(backend_error(
                Some(domain),
                RedisFenceError::AdoptSourceMissing {
                    key: key.to_owned(),
                },
            )),
            "wrong_type" => refused(format!(
                "it holds a {}, not a string: adopt it as a user key (adopt_key)",
                reply.text(0)?
            )),
            "has_entry" => refused(format!(
                "domain `{domain}` already holds a fenced value; adopt it under another domain"
            )),
            "too_large" => refused(format!(
                "it holds {} bytes, over the fence's limit of {}",
                reply.text(0)?,
                self.inner.max_value_bytes
            )),
            "target_exists" => refused(format!(
                "domain `{domain}` already has that user key; pick another name"
            )),
            _ => Err(reply.into_error()),
        }
    }
}

/// A script refused for naming keys of several Cluster slots (by the client or the server).
fn cross_slot(error: &FenceError) -> bool {
    let FenceError::Backend { source, .. } = error else {
        return false;
    };
    matches!(
        source.downcast_ref::<RedisFenceError>(),
        Some(RedisFenceError::Redis(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::CrossSlot)
    )
}
