//! One connection type over standalone Redis and Redis Cluster, and script calls by SHA.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

use crate::error::never_sent;
use crate::scripts::LuaScript;

/// A multiplexed connection to standalone Redis or to a cluster; cheap to clone.
#[derive(Clone)]
pub(crate) enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

/// How often a request that provably never reached the server is sent again.
const RESENDS: u32 = 3;

impl Connection {
    /// Sends `cmd`. A request that provably never left (the connection was refused: see
    /// [`never_sent`]) is sent again a few times with a short pause, so a server that is
    /// restarting is waited for rather than reported as down at once.
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut resent = 0;
        loop {
            let result = match self {
                Connection::Standalone(conn) => cmd.query_async(&mut conn.clone()).await,
                Connection::Cluster(conn) => cmd.query_async(&mut conn.clone()).await,
            };
            match result {
                Err(error) if resent < RESENDS && never_sent(&error) => {
                    resent += 1;
                    tracing::debug!(%error, resent, "request never reached redis; sending it again");
                    // The connection manager reconnects in the background: give it a moment.
                    tokio::time::sleep(Duration::from_millis(25 << resent)).await;
                }
                other => return other,
            }
        }
    }

    /// Runs `script` by SHA; if the server lost its script cache (restart, failover,
    /// `SCRIPT FLUSH`) it answers NOSCRIPT without running anything, and the script is sent
    /// whole with `EVAL`, which also caches it again. `EVAL` carries the keys, so on a cluster it
    /// reaches the node that owns their slot.
    pub(crate) async fn eval(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[&[u8]],
    ) -> RedisResult<Value> {
        let call = |command: &str, body: &str| {
            let mut cmd = redis::cmd(command);
            cmd.arg(body).arg(keys.len()).arg(keys);
            for arg in args {
                cmd.arg(*arg);
            }
            cmd
        };
        match self.query(&call("EVALSHA", &script.sha)).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(
                    script = script.name,
                    "NOSCRIPT: sending the script with EVAL"
                );
                self.query(&call("EVAL", &script.code)).await
            }
            other => other,
        }
    }

    /// `WAIT replicas timeout` on the node that owns `key`, after a write on this connection.
    pub(crate) async fn wait_for_replicas(
        &self,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> RedisResult<u32> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout.as_millis().max(1) as u64);
        let value = match self {
            Connection::Standalone(conn) => cmd.query_async(&mut conn.clone()).await?,
            Connection::Cluster(conn) => {
                let route = Route::with_key(key, SlotAddr::Master);
                conn.clone()
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await?
            }
        };
        Ok(redis::from_redis_value(value)?)
    }
}
