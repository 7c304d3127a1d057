//! Which of the Redis ACL rules the fence needs its user has: each operation the fence, its
//! issuer and its leases perform, run for real on a probe domain.

use std::time::Duration;

use fence_core::permissions::{Access, Permission, PermissionReport};
use fence_core::{Domain, Fence, FenceError, FencedStore, LeaseManager, OwnerId, TokenIssuer};

use fence_core::Operation;

use crate::error::{map_error, BACKEND};
use crate::RedisFence;

/// The domain the probe uses (its mark and issued tokens stay, like every domain's).
pub const PERMISSION_PROBE_DOMAIN: &str = "fence-permission-probe";

impl RedisFence {
    /// Runs each kind of request the fence sends — `PING`, the read, issuer, lease and claim
    /// scripts (each `EVALSHA`, or `EVAL` when the script is not cached, and the commands it
    /// calls on keys `<prefix>:{…}`), and `WAIT` when the fence waits for replicas — on the
    /// domain [`PERMISSION_PROBE_DOMAIN`], and reports which the server's ACL refused, naming
    /// the command Redis names (`NOPERM … 'hset' command`). Grant
    /// [`crate::FENCE_ACL_COMMANDS`] on `~<prefix>:*` (see the crate docs, "Permissions").
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let domain = Domain::new(PERMISSION_PROBE_DOMAIN)?;
        let keys = format!("keys `{}:*`", self.prefix());
        let mut report = PermissionReport::new(BACKEND, format!("{}, {keys}", self.target()));
        let mut check = |name: String, needed_for: &str, access: Access| {
            // The refused command, when the answer names it: first.
            let name = match &access {
                Access::Denied(answer) => match refused_command(answer) {
                    Some(command) if command != name => format!("{command} ({name})"),
                    _ => name,
                },
                _ => name,
            };
            report.push(Permission::new(name, needed_for, access));
        };
        check("PING".into(), "connecting", Access::of(&self.ping().await));
        check(
            format!("EVALSHA, EVAL and the read script's commands on {keys}"),
            "reads",
            Access::of(&self.read(&domain).await),
        );
        let issued = self.issuer().issue(&domain).await;
        check(
            format!("the issuer script's commands on {keys}"),
            "RedisIssuer, issued-only checks",
            Access::of(&issued),
        );
        let owner = OwnerId::new("fence-permission-probe")?;
        let leases = self.leases();
        let lease = leases
            .acquire(&domain, &owner, Duration::from_secs(5))
            .await;
        check(
            format!("the lease scripts' commands on {keys}"),
            "RedisLeases",
            Access::of(&lease),
        );
        if let Ok(lease) = &lease {
            // Best effort: the lease expires on its own in seconds.
            let _ = leases.release(lease).await;
        }
        let token = match (&issued, &lease) {
            (Ok(token), _) => Some(*token),
            (_, Ok(lease)) => Some(lease.token),
            _ => None,
        };
        let claim = match token {
            Some(token) => Access::of(&self.claim(&domain, token).await),
            None => Access::Unknown("no token to claim with: issuing was not granted".into()),
        };
        check(
            format!("the claim script's commands on {keys}"),
            "claims, writes, deletes, fenced scripts",
            claim,
        );
        if self.inner.wait.is_some() {
            // A refused WAIT after a change counts no replica (Unreplicated): ask it alone.
            let waited = match self.connection(None).await {
                Ok(connection) => connection
                    .query(redis::cmd("WAIT").arg(0).arg(1))
                    .await
                    .map_err(|e| map_error(e, None, Operation::Read, false)),
                Err(error) => Err(error),
            };
            check("WAIT".into(), "waiting for replicas", Access::of(&waited));
        }
        Ok(report)
    }
}

/// The command a refusal names: `NOPERM … no permissions to run the 'hset' command`, or
/// fence-redis's own ``redis ACL denies `HSET` in the …`` for a call inside a script.
fn refused_command(answer: &str) -> Option<String> {
    if let Some((_, rest)) = answer.split_once("run the '") {
        let (command, _) = rest.split_once('\'')?;
        return Some(command.to_ascii_uppercase());
    }
    let (_, rest) = answer.split_once("redis ACL denies `")?;
    let (command, _) = rest.split_once('`')?;
    Some(command.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refused_command_is_read_from_noperm() {
        assert_eq!(
            refused_command("NOPERM User w has no permissions to run the 'hset' command")
                .as_deref(),
            Some("HSET")
        );
        assert_eq!(
            refused_command("NOPERM No permissions to access a key"),
            None
        );
        assert_eq!(
            refused_command("redis ACL denies `PEXPIRE` in the `lease_acquire` script (grant …)")
                .as_deref(),
            Some("PEXPIRE")
        );
    }
}
