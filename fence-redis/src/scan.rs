//! A keyspace scan that covers every master of a cluster: for inspection and recovery sweeps.

use fence_core::{FenceError, Operation};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::connection::Connection;
use crate::error::map_error;
use crate::fence::RedisFence;

impl RedisFence {
    /// Every key matching `pattern` (a `SCAN MATCH` glob), on every master of a cluster.
    /// Costs a walk of the whole keyspace: for recovery sweeps, not for hot paths.
    pub(crate) async fn scan(&self, pattern: &str) -> Result<Vec<String>, FenceError> {
        self.scan_pages(pattern, true).await
    }

    /// The first page of [`RedisFence::scan`] on every master: the same commands, without the
    /// walk (what the permission check needs to know that they are allowed).
    pub(crate) async fn scan_first_page(&self, pattern: &str) -> Result<Vec<String>, FenceError> {
        self.scan_pages(pattern, false).await
    }

    async fn scan_pages(&self, pattern: &str, whole: bool) -> Result<Vec<String>, FenceError> {
        let connection = self.connection(None).await?;
        let backend = |e| map_error(e, None, Operation::Read, false);
        let nodes = match &connection {
            Connection::Standalone(_) | Connection::Sentinel(_) => vec![None],
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
                    (Connection::Cluster(cluster), Some((host, port))) => {
                        let answer = cluster
                            .connection()
                            .route_command(
                                cmd,
                                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                                    host: host.clone(),
                                    port: *port,
                                }),
                            )
                            .await;
                        if let Err(error) = &answer {
                            cluster.failed(error);
                        }
                        answer.map_err(backend)?
                    }
                    _ => connection.query(&cmd).await.map_err(backend)?,
                };
                let (next, keys): (u64, Vec<String>) =
                    redis::from_redis_value(value).map_err(|e| backend(e.into()))?;
                found.extend(keys);
                cursor = next;
                if cursor == 0 || !whole {
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
