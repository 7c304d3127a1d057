//! Effects, their kinds, and the registry that says which kinds an outbox accepts.

use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;
use fence_core::Domain;

use crate::error::OutboxError;

/// The greatest length of an effect kind.
pub const MAX_KIND_BYTES: usize = 64;
/// The greatest length of a destination.
pub const MAX_DESTINATION_BYTES: usize = 2048;

/// A side effect to deliver after the transition that records it commits: an opaque payload,
/// a registered kind (`send-receipt-email`) and a destination (a webhook URL, a queue name).
#[derive(Clone, PartialEq, Eq)]
pub struct Effect {
    kind: String,
    destination: String,
    payload: Bytes,
}

impl Effect {
    /// An effect; the kind and destination are checked against the outbox's
    /// [`EffectKinds`] when it is recorded.
    pub fn new(
        kind: impl Into<String>,
        destination: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Self {
        Effect {
            kind: kind.into(),
            destination: destination.into(),
            payload: payload.into(),
        }
    }

    /// The kind.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The destination.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }
}

impl fmt::Debug for Effect {
    // Payloads may hold personal data: only their size is shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Effect")
            .field("kind", &self.kind)
            .field("destination", &self.destination)
            .field("payload_bytes", &self.payload.len())
            .finish()
    }
}

/// What a kind's destinations must look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DestinationRule {
    /// An absolute `http://` or `https://` URL with a host (for the webhook sink).
    HttpUrl,
    /// Any non-empty text without control characters, at most [`MAX_DESTINATION_BYTES`].
    Opaque,
}

/// The effect kinds an outbox accepts, each with its destination rule. Recording an effect of
/// another kind fails with [`OutboxError::UnknownKind`], before any I/O.
///
/// ```
/// use fence_outbox::{DestinationRule, EffectKinds};
/// let kinds = EffectKinds::new()
///     .register("send-receipt-email", DestinationRule::HttpUrl)?
///     .register("charge-card", DestinationRule::HttpUrl)?;
/// assert!(kinds.rule("send-receipt-email").is_some());
/// # Ok::<(), fence_outbox::OutboxError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct EffectKinds {
    kinds: BTreeMap<String, DestinationRule>,
}

impl EffectKinds {
    /// No kinds registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `kind` (1 to [`MAX_KIND_BYTES`] of `[A-Za-z0-9._-]`).
    pub fn register(
        mut self,
        kind: impl Into<String>,
        rule: DestinationRule,
    ) -> Result<Self, OutboxError> {
        let kind = kind.into();
        check_kind(&kind)?;
        self.kinds.insert(kind, rule);
        Ok(self)
    }

    /// The rule of a registered kind.
    pub fn rule(&self, kind: &str) -> Option<DestinationRule> {
        self.kinds.get(kind).copied()
    }

    /// True when no kind is registered.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// Checks an effect of a transition on `domain` against the registry.
    pub fn check(&self, domain: &Domain, effect: &Effect) -> Result<(), OutboxError> {
        let rule = self
            .rule(&effect.kind)
            .ok_or_else(|| OutboxError::UnknownKind {
                domain: domain.clone(),
                kind: effect.kind.clone(),
            })?;
        check_destination(rule, &effect.destination).map_err(|reason| {
            OutboxError::InvalidDestination {
                domain: domain.clone(),
                kind: effect.kind.clone(),
                destination: effect.destination.clone(),
                reason,
            }
        })
    }
}

fn check_kind(kind: &str) -> Result<(), OutboxError> {
    let reason = if kind.is_empty() || kind.len() > MAX_KIND_BYTES {
        Some("must be 1 to 64 bytes")
    } else if !kind
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("only ASCII letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(OutboxError::InvalidName {
            what: "effect kind",
            value: kind.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks a destination against a rule; the reason names what is wrong.
pub fn check_destination(rule: DestinationRule, destination: &str) -> Result<(), String> {
    if destination.is_empty() || destination.len() > MAX_DESTINATION_BYTES {
        return Err(format!("must be 1 to {MAX_DESTINATION_BYTES} bytes"));
    }
    if destination.chars().any(char::is_control) {
        return Err("contains control characters".into());
    }
    match rule {
        DestinationRule::Opaque => Ok(()),
        DestinationRule::HttpUrl => http_url(destination).map(|_| ()),
        #[allow(unreachable_patterns)]
        _ => Err("unknown destination rule".into()),
    }
}

/// The scheme and host of an absolute http(s) URL.
pub(crate) fn http_url(destination: &str) -> Result<(bool, String), String> {
    let (scheme, rest) = destination
        .split_once("://")
        .ok_or_else(|| "is not an absolute URL".to_owned())?;
    let https = match scheme.to_ascii_lowercase().as_str() {
        "https" => true,
        "http" => false,
        other => return Err(format!("scheme `{other}` is not http or https")),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err("has no host".into());
    }
    if rest.chars().any(|c| c.is_whitespace()) {
        return Err("contains whitespace".into());
    }
    Ok((https, host.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_destinations_are_checked() {
        let domain = Domain::new("d").unwrap_or_else(|_| unreachable!());
        let kinds = EffectKinds::new()
            .register("email", DestinationRule::HttpUrl)
            .and_then(|k| k.register("queue", DestinationRule::Opaque));
        let Ok(kinds) = kinds else {
            unreachable!("valid kinds")
        };
        let ok = |kind: &str, dest: &str| kinds.check(&domain, &Effect::new(kind, dest, "x"));
        assert!(ok("email", "https://mail.example/send").is_ok());
        assert!(ok("email", "http://127.0.0.1:8080/hook?a=1").is_ok());
        assert!(ok("queue", "orders-out").is_ok());
        assert!(matches!(
            ok("sms", "https://x"),
            Err(OutboxError::UnknownKind { .. })
        ));
        for bad in [
            "ftp://files.example/x",
            "file:///etc/passwd",
            "mailto:a@b",
            "https://",
            "https:///path",
            "http://:80/",
            "https://a b/",
            "",
        ] {
            assert!(
                matches!(
                    ok("email", bad),
                    Err(OutboxError::InvalidDestination { .. })
                ),
                "{bad}"
            );
        }
        assert!(ok("queue", "line\nbreak").is_err());
        for bad in ["", "a b", "ünïcode", &"k".repeat(65)] {
            assert!(EffectKinds::new()
                .register(bad, DestinationRule::Opaque)
                .is_err());
        }
    }
}
