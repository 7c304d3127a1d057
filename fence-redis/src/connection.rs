//! One connection type over standalone Redis, a Sentinel-managed master and Redis Cluster, and
//! script calls by SHA.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

use crate::cluster::Cluster;
use crate::error::{never_sent, RESEND_BACKOFF};
use crate::scripts::LuaScript;
use crate::sentinel::{refused_as_replica, SentinelMaster};

/// A multiplexed connection to standalone Redis, to the master its sentinels name, or to a
/// cluster; cheap to clone.
#[derive(Clone)]
pub(crate) enum Connection {
    Standalone(ConnectionManager),
    Sentinel(Arc<SentinelMaster>),
    Cluster(Arc<Cluster>),
}

/// How often a request that provably never reached the server is sent again.
const RESENDS: u32 = 3;

/// How a connection is opened on first use.
pub(crate) enum Connector {
    Standalone(redis::Client, ConnectionManagerConfig),
    Cluster(ClusterClient),
}

impl Connector {
    /// Opens the connection (a standalone one lazily: it connects on its first request).
    pub(crate) async fn connect(&self) -> RedisResult<Connection> {
        match self {
            Connector::Standalone(client, config) => {
                ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                    .map(Connection::Standalone)
            }
            Connector::Cluster(client) => client
                .get_async_connection()
                .await
                .map(|conn| Connection::Cluster(Cluster::reopenable(conn, client.clone()))),
        }
    }
}

/// What `WAIT` answered after a script, when the fence waits for replicas (`None`: it does
/// not wait).
pub(crate) type Waited = Option<RedisResult<u32>>;

impl Connection {
    /// Sends `cmd`. A request that provably never left (the connection was refused: see
    /// [`never_sent`]) is sent again a few times with a short pause, so a server that is
    /// restarting is waited for rather than reported as down at once.
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Connection::Standalone(conn) => {
                resend_unsent(|| async { cmd.query_async(&mut conn.clone()).await }).await
            }
            Connection::Sentinel(master) => {
                master
                    .run(|mut conn| async move { cmd.query_async(&mut conn).await })
                    .await
            }
            Connection::Cluster(cluster) => {
                resend_unsent(|| async {
                    let answer = cmd.query_async(&mut cluster.connection()).await;
                    if let Err(error) = &answer {
                        cluster.failed(error);
                    }
                    answer
                })
                .await
            }
        }
    }

    /// Runs `script` by SHA; if the server lost its script cache (restart, failover,
    /// `SCRIPT FLUSH`) it answers NOSCRIPT without running anything, and the script is sent
    /// whole with `EVAL`, which also caches it again. `EVAL` carries the keys, so on a cluster it
    /// reaches the node that owns their slot.
    ///
    /// With `wait`, `WAIT replicas timeout` follows the script on the same connection. On
    /// standalone Redis both go in one pipeline, so no reconnect can come between them (a
    /// `WAIT` on a fresh connection counts nothing of the script); on a cluster `WAIT` is routed
    /// to the master of the script's slot right after it.
    pub(crate) async fn eval(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[&[u8]],
        wait: Option<(u32, Duration)>,
    ) -> RedisResult<(Value, Waited)> {
        let call = |command: &str, body: &str| {
            let mut cmd = redis::cmd(command);
            cmd.arg(body).arg(keys.len()).arg(keys);
            for arg in args {
                cmd.arg(*arg);
            }
            cmd
        };
        let first = self
            .eval_once(call("EVALSHA", &script.sha), keys, wait)
            .await?;
        match first {
            (Err(error), _) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                tracing::debug!(
                    script = script.name,
                    "NOSCRIPT: sending the script with EVAL"
                );
                let (value, waited) = self
                    .eval_once(call("EVAL", &script.code), keys, wait)
                    .await?;
                Ok((value?, waited))
            }
            (value, waited) => Ok((value?, waited)),
        }
    }

    /// One script call and its `WAIT`: the outer error is the transport's, the inner one the
    /// script's own.
    async fn eval_once(
        &self,
        call: Cmd,
        keys: &[String],
        wait: Option<(u32, Duration)>,
    ) -> RedisResult<(RedisResult<Value>, Waited)> {
        let Some((replicas, timeout)) = wait else {
            return match self.query(&call).await {
                Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    Ok((Err(error), None))
                }
                other => other.map(|value| (Ok(value), None)),
            };
        };
        let mut wait_cmd = redis::cmd("WAIT");
        wait_cmd
            .arg(replicas)
            .arg(timeout.as_millis().max(1) as u64);
        let mut pipe = redis::pipe();
        pipe.ignore_errors()
            .add_command(call.clone())
            .add_command(wait_cmd.clone());
        // On one connection, so no reconnect can come between the script and its WAIT.
        let pipelined = |mut conn: ConnectionManager| {
            let pipe = &pipe;
            async move {
                let mut results: Vec<RedisResult<Value>> = pipe.query_async(&mut conn).await?;
                // A demoted master refuses the script: an error of the whole request, so that
                // the master is looked up again and the script sent to it.
                if matches!(results.first(), Some(Err(e)) if refused_as_replica(e)) {
                    if let Some(Err(error)) = results.drain(..1).next() {
                        return Err(error);
                    }
                }
                Ok(results)
            }
        };
        let mut results = match self {
            Connection::Standalone(conn) => resend_unsent(|| pipelined(conn.clone())).await?,
            Connection::Sentinel(master) => master.run(pipelined).await?,
            Connection::Cluster(cluster) => {
                return self
                    .eval_then_wait_on_cluster(cluster, call, keys, wait_cmd)
                    .await
            }
        };
        let (Some(waited), Some(value), None) = (results.pop(), results.pop(), results.pop())
        else {
            return Err(redis::RedisError::from((
                ErrorKind::Client,
                "a script and WAIT pipeline answered with a different number of replies",
            )));
        };
        let waited = waited.and_then(|v| redis::from_redis_value(v).map_err(Into::into));
        Ok((value, Some(waited)))
    }

    /// On a cluster, `WAIT` goes to the master of the script's slot right after the script, on
    /// the same connection handle: one the fence reopened in between has sent nothing, and its
    /// `WAIT` would count replicas for writes it never made.
    async fn eval_then_wait_on_cluster(
        &self,
        cluster: &Arc<Cluster>,
        call: Cmd,
        keys: &[String],
        wait_cmd: Cmd,
    ) -> RedisResult<(RedisResult<Value>, Waited)> {
        let conn = cluster.connection();
        let value = resend_unsent(|| async {
            let answer = call.query_async(&mut conn.clone()).await;
            if let Err(error) = &answer {
                cluster.failed(error);
            }
            answer
        })
        .await;
        let value = match value {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                return Ok((Err(error), None))
            }
            other => other?,
        };
        let key = keys.first().map(String::as_str).unwrap_or_default();
        let route = Route::with_key(key, SlotAddr::Master);
        let waited = conn
            .clone()
            .route_command(
                wait_cmd,
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
            )
            .await;
        if let Err(error) = &waited {
            cluster.failed(error);
        }
        let waited = waited.and_then(|v| redis::from_redis_value(v).map_err(Into::into));
        Ok((Ok(value), Some(waited)))
    }
}

/// Runs `send` again, a few times with a short pause, while it fails with an error that proves
/// nothing was sent (see [`never_sent`]).
async fn resend_unsent<T, F, Fut>(mut send: F) -> RedisResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = RedisResult<T>>,
{
    let mut resent = 0;
    loop {
        match send().await {
            Err(error) if resent < RESENDS && never_sent(&error) => {
                resent += 1;
                tracing::debug!(%error, resent, "request never reached redis; sending it again");
                // The connection manager reconnects in the background: give it a moment.
                tokio::time::sleep(RESEND_BACKOFF.delay(resent - 1)).await;
            }
            other => return other,
        }
    }
}
