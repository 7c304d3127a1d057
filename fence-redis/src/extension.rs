//! Building blocks for crates layered on fence-redis (such as fence-outbox): scripts that share
//! the fence prelude, raw commands with fence error mapping, and a keyspace scan that covers
//! every cluster master.

use std::fmt;
use std::time::Duration;

use fence_core::{Domain, FenceError, FencingToken, Operation, OperationId};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use crate::connection::{Connection, Waited};
use crate::error::map_error;
use crate::fence::RedisFence;
use crate::scripts::LuaScript;

/// What `WAIT` answered after [`RedisFence::eval_fenced_script`]; judge it with
/// [`RedisFence::replicas_acknowledged`] once the script's reply says the change applied.
#[derive(Debug)]
pub struct ReplicaAcks(Waited);

/// A Lua script that runs after fence-redis's prelude, so it can use the prelude's exact token
/// helpers (`cmp`, `is_token`, `increment`, `field`, `load_state`, `admit`).
///
/// Touch only keys passed in `KEYS`, and only keys of one domain (one hash tag), so the script
/// stays single-slot on Redis Cluster.
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
    /// The key prefix every key of this fence starts with.
    pub fn prefix(&self) -> &str {
        self.inner.keys.prefix()
    }

    /// The key of `domain`'s fence state hash (its high-water mark), for scripts that pass it
    /// to the prelude's `admit`.
    pub fn state_key(&self, domain: &Domain) -> String {
        self.inner.keys.state(domain)
    }

    /// The key recording the first outcome of `op_id` under `token` (a same-slot placeholder
    /// when there is no op id).
    pub fn op_key(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: Option<&OperationId>,
    ) -> String {
        self.inner.keys.op(domain, token, op_id)
    }

    /// How long op-id outcomes are kept.
    pub fn op_id_retention(&self) -> Duration {
        self.inner.op_id_retention
    }

    /// Runs `script` with `keys` (all of `domain`'s slot) and `args`, by `EVALSHA` with an
    /// `EVAL` fallback. `mutating` decides how a lost reply is reported: a script that may have
    /// written is [`FenceError::Ambiguous`] when its reply is lost. A fenced change that must
    /// wait for replicas uses [`RedisFence::eval_fenced_script`] instead.
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

    /// Runs a fenced change like [`RedisFence::eval_script`], followed on the same connection
    /// by the `WAIT` the fence is configured for (see
    /// [`crate::RedisFenceBuilder::wait_for_replicas`]). Once the reply says the change was
    /// applied or replayed, pass the [`ReplicaAcks`] to [`RedisFence::replicas_acknowledged`].
    pub async fn eval_fenced_script(
        &self,
        script: &RedisScript,
        domain: &Domain,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<(Value, ReplicaAcks), FenceError> {
        let (value, waited) = self
            .eval_raw(
                &script.script,
                domain,
                Operation::Write,
                true,
                self.inner.wait,
                keys,
                args,
            )
            .await?;
        Ok((value, ReplicaAcks(waited)))
    }

    /// The replicas that acknowledged an applied or replayed change (`None` when the fence
    /// waits for none), or [`FenceError::Unreplicated`] when fewer than asked did in time.
    pub fn replicas_acknowledged(
        &self,
        domain: &Domain,
        acks: ReplicaAcks,
    ) -> Result<Option<u32>, FenceError> {
        self.replicas(domain, Operation::Write, acks.0)
    }

    /// Runs one command; on a cluster it is routed by its first key.
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
