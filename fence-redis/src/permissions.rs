//! Which of the Redis ACL rules the fence needs its user has: each command, used for real on
//! keys no domain can have (`<prefix>:{!permission-probe}:…`, covered by the user's key
//! pattern like every key of the fence), so no domain's state is touched.

use std::sync::LazyLock;

use fence_core::permissions::{Access, Permission, PermissionReport, PROBE_SEGMENT};
use fence_core::{FenceError, Operation};
use redis::Value;

use crate::connection::Connection;
use crate::error::{map_error, BACKEND};
use crate::scripts::LuaScript;
use crate::RedisFence;

/// The commands the probe script tries, in its order (`lua/permissions.lua`).
const SCRIPT_COMMANDS: [&str; 15] = [
    "TYPE", "EXISTS", "GET", "SET", "HGET", "HMGET", "HGETALL", "HSET", "HDEL", "RPUSH", "LRANGE",
    "PEXPIRE", "PTTL", "TIME", "DEL",
];

static PROBE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::bare("permissions", include_str!("lua/permissions.lua")));

impl RedisFence {
    /// Uses each command in [`crate::FENCE_ACL_COMMANDS`] and reports, by name, which the
    /// server's ACL refused: `PING`, `ROLE` (behind Sentinel the client asks the master its
    /// role), `EVALSHA`/`EVAL` running a probe script that calls every command the fence's
    /// scripts call (Redis checks ACLs on each call inside a script) on keys
    /// `<prefix>:{!permission-probe}:*` — no domain's, but under the prefix — that expire within
    /// seconds, `WAIT` when the fence waits for replicas, `CLUSTER SLOTS` on a cluster, and
    /// [`crate::RETIRE_ACL_COMMANDS`] (`SCAN`, and `CLUSTER NODES` on a cluster) as retirement
    /// walks the keyspace: an operator's step, denied to a worker's user by design.
    /// See the crate docs, "Permissions".
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let keys = format!("keys `{}:*`", self.prefix());
        let mut report = PermissionReport::new(BACKEND, format!("{}, {keys}", self.target()));
        let connection = self.connection(None).await?;
        let query = |cmd: redis::Cmd| {
            let connection = connection.clone();
            async move {
                connection
                    .query(&cmd)
                    .await
                    .map_err(|e| map_error(e, None, Operation::Read, false))
            }
        };
        report.push(Permission::new(
            "PING",
            "connecting",
            Access::of(&query(redis::cmd("PING")).await),
        ));
        report.push(Permission::new(
            "ROLE",
            "finding the master through Sentinel",
            Access::of(&query(redis::cmd("ROLE")).await),
        ));
        let tagged = |suffix: &str| format!("{}:{{{PROBE_SEGMENT}}}:{suffix}", self.prefix());
        let probe_keys = [tagged("s"), tagged("h"), tagged("l")];
        let ran = connection
            .eval(&PROBE, &probe_keys, &[], None)
            .await
            .map_err(|e| map_error(e, None, Operation::Read, false))
            .map(|(value, _)| value);
        report.push(Permission::new(
            "EVALSHA, EVAL",
            "every fenced operation runs as a script",
            Access::of(&ran),
        ));
        let refused = match &ran {
            Ok(value) => refusals(value),
            Err(_) => None,
        };
        for command in SCRIPT_COMMANDS {
            let access = match &refused {
                Some(refused) => match refused.iter().find(|(name, _)| name == command) {
                    Some((_, answer)) => Access::Denied(answer.clone()),
                    None => Access::Granted,
                },
                None => Access::Unknown("the probe script could not run".into()),
            };
            report.push(Permission::new(
                format!("{command} on {keys}"),
                "inside the fence's scripts",
                access,
            ));
        }
        if self.inner.wait.is_some() {
            let waited = query(redis::cmd("WAIT").arg(0).arg(1).clone()).await;
            report.push(Permission::new(
                "WAIT",
                "waiting for replicas",
                Access::of(&waited),
            ));
        }
        // Retirement's walk, as it runs (an operator's user; workers need not have it).
        let walked = self
            .scan_first_page(&format!("{}*", crate::ops::glob_escape(&tagged(""))))
            .await;
        report.push(
            Permission::new(
                match connection {
                    Connection::Cluster(_) => "SCAN, CLUSTER NODES",
                    _ => "SCAN",
                },
                "retire: finding a domain's keys",
                Access::of(&walked),
            )
            .for_operators(),
        );
        if let Connection::Cluster(_) = connection {
            let slots = query(redis::cmd("CLUSTER").arg("SLOTS").clone()).await;
            report.push(Permission::new(
                "CLUSTER SLOTS",
                "the cluster client's slot map",
                Access::of(&slots),
            ));
        }
        Ok(report)
    }
}

/// The (command, answer) pairs of the probe script's reply; `None` for another shape.
fn refusals(value: &Value) -> Option<Vec<(String, String)>> {
    let Value::Array(items) = value else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    items
        .chunks(2)
        .map(|pair| match pair {
            [name, answer] => Some((text(name)?, text(answer)?)),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_tries_every_command_the_scripts_call() {
        // FENCE_ACL_COMMANDS less what runs outside scripts.
        let outside = [
            "EVALSHA",
            "EVAL",
            "PING",
            "WAIT",
            "ROLE",
            "CLUSTER|SLOTS",
            "CLUSTER|SHARDS",
            "ASKING",
        ];
        let mut documented: Vec<String> = crate::FENCE_ACL_COMMANDS
            .split_whitespace()
            .map(|c| c.trim_start_matches('+').to_ascii_uppercase())
            .filter(|c| !outside.contains(&c.as_str()))
            .collect();
        documented.sort();
        let mut probed: Vec<String> = SCRIPT_COMMANDS.iter().map(|c| (*c).to_owned()).collect();
        probed.sort();
        assert_eq!(probed, documented);
        let script = include_str!("lua/permissions.lua");
        for command in SCRIPT_COMMANDS {
            assert!(script.contains(&format!("try('{command}'")), "{command}");
        }
    }
}
