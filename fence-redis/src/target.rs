//! Where a fence connects: a standalone server, a cluster, a master behind Sentinel or a
//! connection the caller made, and how each is opened.

use std::sync::Arc;
use std::time::Duration;

use fence_core::{FenceError, InvalidInput, Operation};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use tokio::sync::OnceCell;

use crate::cluster::Cluster;
use crate::connection::{Connection, Connector};
use crate::error::map_error;
use crate::sentinel::SentinelMaster;

/// A fence's target, as the builder was told.
pub(crate) enum Target {
    Url(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
    Manager(ConnectionManager),
    ClusterConnection(ClusterConnection),
}

/// Credentials for the master a sentinel names (the sentinels' own are in their URLs).
#[derive(Clone, Default)]
pub(crate) struct MasterAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// The fence's timeouts, which every connection it opens uses.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub(crate) response: Duration,
    pub(crate) connection: Duration,
}

/// The connection a fence starts with (set when the target is a connection, or Sentinel's
/// master tracker), and the connector that opens one on first use otherwise.
pub(crate) type Opened = (OnceCell<Connection>, Option<Connector>);

impl Target {
    /// Where it points, with every password redacted: for `Debug`, logs and errors.
    pub(crate) fn describe(&self) -> String {
        let redacted = |nodes: &[String]| {
            nodes
                .iter()
                .map(|n| redact(n))
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Target::Url(url) => redact(url),
            Target::Cluster(nodes) => format!("cluster {}", redacted(nodes)),
            Target::Sentinel { sentinels, service } => {
                format!("sentinel {} service {service}", redacted(sentinels))
            }
            Target::Manager(_) => "existing connection".to_owned(),
            Target::ClusterConnection(_) => "existing cluster connection".to_owned(),
        }
    }

    /// Checks the target and prepares its connection, with no I/O.
    pub(crate) fn open(self, auth: &MasterAuth, timeouts: Timeouts) -> Result<Opened, FenceError> {
        match self {
            Target::Url(url) => standalone(&url, timeouts),
            Target::Sentinel { sentinels, service } => sentinel(sentinels, service, auth, timeouts),
            Target::Cluster(nodes) => cluster(nodes, timeouts),
            Target::Manager(manager) => Ok((
                OnceCell::new_with(Some(Connection::Standalone(manager))),
                None,
            )),
            Target::ClusterConnection(connection) => Ok((
                OnceCell::new_with(Some(Connection::Cluster(Cluster::fixed(connection)))),
                None,
            )),
        }
    }
}

/// A standalone server: RESP3, so that the connection reports its own loss (the manager then
/// replaces a dropped connection, a server restart, before the next request is written to it,
/// instead of that request failing in a way that cannot tell whether it left). The manager
/// spawns a task, so it is made on first use, inside the runtime.
fn standalone(url: &str, timeouts: Timeouts) -> Result<Opened, FenceError> {
    let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(config_error)?;
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(settings)).map_err(config_error)?;
    let config = manager_config(timeouts);
    Ok((OnceCell::new(), Some(Connector::Standalone(client, config))))
}

/// The master a set of sentinels names, followed across failovers.
fn sentinel(
    sentinels: Vec<String>,
    service: String,
    auth: &MasterAuth,
    timeouts: Timeouts,
) -> Result<Opened, FenceError> {
    if sentinels.is_empty() || service.is_empty() {
        return Err(InvalidInput::Configuration(
            "sentinel needs at least one sentinel address and the service name".into(),
        )
        .into());
    }
    let mut master =
        redis::RedisConnectionInfo::default().set_protocol(redis::ProtocolVersion::RESP3);
    if let Some(username) = &auth.username {
        master = master.set_username(username);
    }
    if let Some(password) = &auth.password {
        master = master.set_password(password);
    }
    let mut node =
        redis::sentinel::SentinelNodeConnectionInfo::default().set_redis_connection_info(master);
    // TLS to the sentinels means TLS to the master too.
    if sentinels.iter().any(|n| n.starts_with("rediss://")) {
        node = node.set_tls_mode(redis::TlsMode::Secure);
    }
    let client = redis::sentinel::SentinelClient::build(
        sentinels,
        service.clone(),
        Some(node),
        redis::sentinel::SentinelServerType::Master,
    )
    .map_err(config_error)?;
    let master = SentinelMaster::new(
        client,
        service,
        manager_config(timeouts),
        timeouts.connection + timeouts.response,
    );
    Ok((
        OnceCell::new_with(Some(Connection::Sentinel(Arc::new(master)))),
        None,
    ))
}

/// A cluster, from its seed nodes.
fn cluster(nodes: Vec<String>, timeouts: Timeouts) -> Result<Opened, FenceError> {
    if nodes.is_empty() {
        return Err(
            InvalidInput::Configuration("cluster needs at least one seed node".into()).into(),
        );
    }
    let client = ClusterClientBuilder::new(nodes)
        .use_protocol(redis::ProtocolVersion::RESP3)
        .response_timeout(timeouts.response)
        .connection_timeout(timeouts.connection)
        .build()
        .map_err(config_error)?;
    Ok((OnceCell::new(), Some(Connector::Cluster(client))))
}

/// The connection manager's settings: the fence's timeouts, and two reconnection attempts.
fn manager_config(timeouts: Timeouts) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(timeouts.response))
        .set_connection_timeout(Some(timeouts.connection))
        .set_number_of_retries(2)
}

fn config_error(error: redis::RedisError) -> FenceError {
    map_error(error, None, Operation::Read, false)
}

/// A URL with any password replaced by `***`, for Debug and logs.
pub(crate) fn redact(url: &str) -> String {
    fence_core::env::redact_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_a_description() {
        assert_eq!(
            redact("redis://:s3cret@host:6379/0"),
            "redis://:***@host:6379/0"
        );
        assert_eq!(redact("rediss://app:s3cret@host"), "rediss://app:***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }
}
