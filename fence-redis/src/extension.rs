//! Raw access for crates layered on fence-redis (such as fence-outbox-redis): unfenced scripts
//! that share the prelude, single commands with the fence's error mapping, and a keyspace scan
//! that covers every cluster master. None of it is fenced, so none of it is in the ordinary API:
//! it exists only with the `unstable-raw` feature and may change in any release. Fenced
//! mutations of extensions go through [`crate::FencedBody`].

use std::fmt;

use fence_core::{Domain, FenceError, Operation};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use crate::connection::Connection;
use crate::error::map_error;
use crate::fence::RedisFence;
use crate::scripts::LuaScript;

/// An unfenced script: fence-redis's prelude (exact token comparison, `field`, `is_token`)
/// followed by a body, run by [`RedisFence::eval_script`].
pub struct RedisScript {
    script: LuaScript,
}

impl RedisScript {
    /// The prelude plus `body`; `name` appears in errors about the script's replies.
    pub fn new(name: &'static str, body: &str) -> Self {
        RedisScript {
            script: LuaScript::with_prelude(name, body),
        }
    }

    /// The script's name.
    pub fn name(&self) -> &'static str {
        self.script.name
    }
}

impl fmt::Debug for RedisScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisScript")
            .field("name", &self.script.name)
            .field("sha", &self.script.sha)
            .finish()
    }
}

impl RedisFence {
    /// Runs `script` (not fenced: it may read or write any key it is given) on the node that
    /// serves `domain`'s slot. `mutating` says whether a lost reply leaves the outcome unknown.
    pub async fn eval_script(
        &self,
        script: &RedisScript,
        domain: &Domain,
        mutating: bool,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<Value, FenceError> {
        let operation = if mutating {
            Operation::Write
        } else {
            Operation::Read
        };
        let (value, _) = self
            .eval_raw(
                &script.script,
                domain,
                operation,
                mutating,
                None,
                keys,
                args,
            )
            .await?;
        Ok(value)
    }

    /// Runs one command (not fenced), with the fence's error mapping.
    pub async fn query(&self, cmd: &redis::Cmd) -> Result<Value, FenceError> {
        let connection = self.connection(None).await?;
        connection
            .query(cmd)
            .await
            .map_err(|e| map_error(e, None, Operation::Read, true))
    }

    /// Every key matching `pattern` (a `SCAN MATCH` glob), on every master of a cluster.
    /// Costs a walk of the whole keyspace: for recovery sweeps, not for hot paths.
    pub async fn scan_keys(&self, pattern: &str) -> Result<Vec<String>, FenceError> {
        let connection = self.connection(None).await?;
        let backend = |e| map_error(e, None, Operation::Read, false);
        let nodes = match &connection {
            Connection::Standalone(_) => vec![None],
            Connection::Cluster(_) => {
                let text: String = redis::from_redis_value(
                    connection
                        .query(redis::cmd("CLUSTER").arg("NODES"))
                        .await
                        .map_err(backend)?,
                )
                .map_err(|e| backend(e.into()))?;
                masters(&text).into_iter().map(Some).collect()
            }
        };
        let mut found = Vec::new();
        for node in nodes {
            let mut cursor = 0u64;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000);
                let value = match (&connection, &node) {
                    (Connection::Cluster(conn), Some((host, port))) => conn
                        .clone()
                        .route_command(
                            cmd,
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                                host: host.clone(),
                                port: *port,
                            }),
                        )
                        .await
                        .map_err(backend)?,
                    _ => connection.query(&cmd).await.map_err(backend)?,
                };
                let (next, keys): (u64, Vec<String>) =
                    redis::from_redis_value(value).map_err(|e| backend(e.into()))?;
                found.extend(keys);
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(found)
    }
}

/// Master addresses from `CLUSTER NODES` output (`<id> <ip:port@cport[,hostname]> <flags> ...`).
fn masters(nodes: &str) -> Vec<(String, u16)> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let host_port = address.split(['@', ',']).next()?;
            let (host, port) = host_port.rsplit_once(':')?;
            Some((host.to_owned(), port.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::masters;

    #[test]
    fn cluster_nodes_lines_give_master_addresses() {
        let text = "a1 127.0.0.1:7101@17101 myself,master - 0 0 1 connected 0-5460\n\
                    b2 127.0.0.1:7104@17104 slave a1 0 0 1 connected\n\
                    c3 127.0.0.1:7102@17102,host-b master - 0 0 2 connected 5461-10922\n\
                    d4 127.0.0.1:7103@17103 master,fail - 0 0 3 disconnected\n";
        assert_eq!(
            masters(text),
            vec![
                ("127.0.0.1".to_owned(), 7101),
                ("127.0.0.1".to_owned(), 7102)
            ]
        );
    }
}
