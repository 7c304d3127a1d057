//! Removing what a `qualify` run created: every key under its Redis prefix, object under its
//! S3 or object store prefix, its PostgreSQL schema, keys under its etcd prefix, items of its
//! DynamoDB namespace, or its Kafka topics.

use std::sync::Arc;

use fence_core::Observed;
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_dynamodb::DynamoDb;
use fence_etcd::Etcd;
use fence_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use fence_kafka::rdkafka::client::DefaultClientContext;
use fence_kafka::rdkafka::ClientConfig;
use fence_mysql::MySqlFence;
use fence_object_store::object_store::ObjectStore;
use fence_object_store::ObjectStoreFence;
use fence_postgres::PostgresFence;
use fence_redis::redis;

use crate::report::Report;
use crate::targets::{with_authority, Targets};

/// What to remove after a run, and where.
pub(crate) enum Cleanup {
    /// Keys matching `<prefix>:*` on every node.
    Redis {
        /// Standalone URL, or every cluster node's.
        nodes: Vec<String>,
        /// The run's prefix.
        prefix: String,
        cluster: bool,
    },
    /// Objects under the prefix.
    S3 {
        client: fence_s3::aws_sdk_s3::Client,
        bucket: String,
        prefix: String,
    },
    /// Objects under the prefix, through object_store.
    ObjectStore {
        store: Arc<dyn ObjectStore>,
        prefix: String,
    },
    /// The run's schema.
    Postgres {
        pool: fence_postgres::sqlx::PgPool,
        schema: String,
    },
    /// The run's database.
    Mysql {
        pool: fence_mysql::sqlx::MySqlPool,
        database: String,
    },
    /// Keys under the run's prefix.
    Etcd { etcd: Box<Etcd> },
    /// Items of the run's namespace in the table.
    Dynamodb { dynamodb: Box<DynamoDb> },
    /// The run's topics.
    Kafka {
        config: ClientConfig,
        topics: Vec<String>,
    },
}

impl Cleanup {
    pub(crate) fn redis(targets: &Targets, scoped: &Targets) -> Self {
        let (nodes, cluster) = targets.redis_nodes();
        Cleanup::Redis {
            nodes,
            prefix: scoped.redis_key_prefix().to_owned(),
            cluster,
        }
    }

    pub(crate) async fn s3(scoped: &Targets) -> Result<Self, Report> {
        Ok(Cleanup::S3 {
            client: scoped.s3_client().await?,
            bucket: scoped.s3_bucket()?,
            prefix: scoped.s3_object_prefix().to_owned(),
        })
    }

    /// Everything under the fence's prefix, in the fence's store.
    pub(crate) fn object_store(fence: &ObjectStoreFence) -> Self {
        Cleanup::ObjectStore {
            store: fence.store().clone(),
            prefix: fence.prefix().to_owned(),
        }
    }

    pub(crate) fn postgres(fence: &Observed<PostgresFence>) -> Self {
        Cleanup::Postgres {
            pool: fence.pool().clone(),
            schema: fence.schema().to_owned(),
        }
    }

    pub(crate) fn mysql(fence: &Observed<MySqlFence>) -> Self {
        Cleanup::Mysql {
            pool: fence.pool().clone(),
            database: fence.database().to_owned(),
        }
    }

    pub(crate) fn etcd(etcd: &Etcd) -> Self {
        Cleanup::Etcd {
            etcd: Box::new(etcd.clone()),
        }
    }

    pub(crate) fn dynamodb(dynamodb: &DynamoDb) -> Self {
        Cleanup::Dynamodb {
            dynamodb: Box::new(dynamodb.clone()),
        }
    }

    /// Creates the run's data and ledger topics (one partition each), to delete afterwards.
    pub(crate) async fn kafka(scoped: &Targets) -> Result<Self, Report> {
        let (config, topics) = scoped.kafka_topics()?;
        let admin: AdminClient<DefaultClientContext> = config
            .create()
            .map_err(|e| Report::usage(format!("Kafka admin client: {e}")))?;
        let new: Vec<NewTopic<'_>> = topics
            .iter()
            .map(|t| NewTopic::new(t, 1, TopicReplication::Fixed(-1)))
            .collect();
        let results = admin
            .create_topics(&new, &AdminOptions::new())
            .await
            .map_err(|e| Report::usage(format!("creating the run's topics: {e}")))?;
        let created: Vec<String> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        if let Some((topic, code)) = results.into_iter().find_map(Result::err) {
            // Remove what was created before the refusal.
            let _ = (Cleanup::Kafka {
                config,
                topics: created,
            })
            .run()
            .await;
            return Err(Report::usage(format!(
                "creating topic {topic}: {code} (qualify needs the CreateTopics and DeleteTopics ACLs on its topics)"
            )));
        }
        Ok(Cleanup::Kafka { config, topics })
    }

    /// Where the run's state lives, for people.
    pub(crate) fn scope(&self) -> String {
        match self {
            Cleanup::Redis { prefix, .. } => format!("Redis keys {prefix}:*"),
            Cleanup::S3 { bucket, prefix, .. } => format!("objects s3://{bucket}/{prefix}"),
            Cleanup::ObjectStore { store, prefix } => format!("objects `{prefix}` in {store}"),
            Cleanup::Postgres { schema, .. } => format!("PostgreSQL schema {schema}"),
            Cleanup::Mysql { database, .. } => format!("MySQL database {database}"),
            Cleanup::Etcd { etcd } => format!("etcd keys {}/*", etcd.prefix()),
            Cleanup::Dynamodb { dynamodb } => format!(
                "DynamoDB items {}/* of table {}",
                dynamodb.namespace(),
                dynamodb.table()
            ),
            Cleanup::Kafka { topics, .. } => format!("Kafka topics {}", topics.join(", ")),
        }
    }

    /// Removes it all; says how much.
    pub(crate) async fn run(&self) -> Result<String, String> {
        match self {
            Cleanup::Redis {
                nodes,
                prefix,
                cluster,
            } => redis_cleanup(nodes, prefix, *cluster).await,
            Cleanup::S3 {
                client,
                bucket,
                prefix,
            } => s3_cleanup(client, bucket, prefix).await,
            Cleanup::ObjectStore { store, prefix } => object_store_cleanup(&**store, prefix).await,
            Cleanup::Postgres { pool, schema } => {
                let existed: bool = fence_postgres::sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)",
                )
                .bind(schema)
                .fetch_one(pool)
                .await
                .map_err(|e| e.to_string())?;
                // The schema name was validated by PostgresFence (an identifier).
                fence_postgres::sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .execute(pool)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(if existed { "1 schema" } else { "0 schemas" }.to_owned())
            }
            Cleanup::Mysql { pool, database } => {
                let existed: i64 = fence_mysql::sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
                )
                .bind(database)
                .fetch_one(pool)
                .await
                .map_err(|e| e.to_string())?;
                // The database name was validated by MySqlFence (an identifier).
                fence_mysql::sqlx::query(&format!("DROP DATABASE IF EXISTS `{database}`"))
                    .execute(pool)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(if existed > 0 {
                    "1 database"
                } else {
                    "0 databases"
                }
                .to_owned())
            }
            Cleanup::Etcd { etcd } => {
                // Every key of the fence is `<prefix>/...`: the slash keeps a longer prefix
                // that merely starts with this one out of the range.
                let options = fence_etcd::etcd_client::DeleteOptions::new().with_prefix();
                etcd.client()
                    .kv_client()
                    .delete(format!("{}/", etcd.prefix()), Some(options))
                    .await
                    .map(|r| format!("{} keys", r.deleted()))
                    .map_err(|e| e.to_string())
            }
            Cleanup::Dynamodb { dynamodb } => dynamodb_cleanup(dynamodb).await,
            Cleanup::Kafka { config, topics } => {
                let admin: AdminClient<DefaultClientContext> =
                    config.create().map_err(|e| e.to_string())?;
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                let results = admin
                    .delete_topics(&names, &AdminOptions::new())
                    .await
                    .map_err(|e| e.to_string())?;
                for result in results {
                    result.map_err(|(topic, code)| format!("deleting {topic}: {code}"))?;
                }
                Ok(format!("{} topics", topics.len()))
            }
        }
    }
}

/// Deletes every item of the handle's namespace: a `Scan` of the table for the keys that start
/// with `<namespace>/` (the slash keeps a longer namespace that merely starts with this one
/// out), then one `DeleteItem` each. The scan reads the whole table: point qualify at a table
/// of its own when yours is large.
async fn dynamodb_cleanup(dynamodb: &DynamoDb) -> Result<String, String> {
    let prefix = AttributeValue::S(format!("{}/", dynamodb.namespace()));
    let client = dynamodb.client();
    let mut start = None;
    let mut deleted = 0_u64;
    loop {
        let page = client
            .scan()
            .table_name(dynamodb.table())
            .filter_expression("begins_with(pk, :p)")
            .projection_expression("pk")
            .expression_attribute_values(":p", prefix.clone())
            .consistent_read(true)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| format!("scanning {}: {}", dynamodb.table(), e.into_service_error()))?;
        for key in page.items() {
            client
                .delete_item()
                .table_name(dynamodb.table())
                .set_key(Some(key.clone()))
                .send()
                .await
                .map_err(|e| format!("deleting {key:?}: {}", e.into_service_error()))?;
            deleted += 1;
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            return Ok(format!("{deleted} items"));
        }
    }
}

/// A glob pattern matching exactly the keys that start with `prefix:`.
fn key_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(":*");
    pattern
}

/// A Redis Cluster's masters, as URLs like the configured `seed`'s (scheme and credentials
/// kept), from `CLUSTER NODES`: keys live on masters, and a replica refuses DEL.
async fn cluster_masters(seed: &str) -> Result<Vec<String>, String> {
    let client = redis::Client::open(seed).map_err(|e| e.to_string())?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut connection)
        .await
        .map_err(|e| e.to_string())?;
    let mut masters = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(address), Some(flags)) = (fields.get(1), fields.get(2)) else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if !flags.contains(&"master") || flags.iter().any(|f| *f == "fail" || *f == "noaddr") {
            continue;
        }
        // `ip:port@cport[,hostname]`
        let address = address.split(['@', ',']).next().unwrap_or_default();
        let url = with_authority(seed, address).ok_or_else(|| {
            format!(
                "cannot form a URL for node {address} from {}",
                seed.split("://").next().unwrap_or("the seed")
            )
        })?;
        masters.push(url);
    }
    if masters.is_empty() {
        return Err("CLUSTER NODES named no master".into());
    }
    Ok(masters)
}

async fn redis_cleanup(nodes: &[String], prefix: &str, cluster: bool) -> Result<String, String> {
    let pattern = key_pattern(prefix);
    let mut removed = 0usize;
    let nodes = match (cluster, nodes.first()) {
        (true, Some(seed)) => cluster_masters(seed).await?,
        _ => nodes.to_vec(),
    };
    for node in &nodes {
        let client = redis::Client::open(node.as_str()).map_err(|e| e.to_string())?;
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(500)
                .query_async(&mut connection)
                .await
                .map_err(|e| e.to_string())?;
            // On a cluster, one key per DEL: keys of different slots cannot share a command.
            let batches: Vec<&[Vec<u8>]> = if cluster {
                keys.chunks(1).collect()
            } else {
                keys.chunks(500).collect()
            };
            for batch in batches {
                let deleted: usize = redis::cmd("DEL")
                    .arg(batch)
                    .query_async(&mut connection)
                    .await
                    .map_err(|e| e.to_string())?;
                removed += deleted;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(format!("{removed} keys"))
}

/// Deletes every object under the run's `prefix`.
async fn object_store_cleanup(store: &dyn ObjectStore, prefix: &str) -> Result<String, String> {
    fence_object_store::delete_under(store, prefix)
        .await
        .map(|removed| format!("{removed} objects"))
        .map_err(|e| format!("deleting `{prefix}` in {store}: {e}"))
}

async fn s3_cleanup(
    client: &fence_s3::aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
) -> Result<String, String> {
    let mut removed = 0usize;
    let mut token = None;
    loop {
        let listed = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .map_err(|e| format!("listing s3://{bucket}/{prefix}: {e}"))?;
        for object in listed.contents() {
            let Some(key) = object.key() else { continue };
            client
                .delete_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .map_err(|e| format!("deleting s3://{bucket}/{key}: {e}"))?;
            removed += 1;
        }
        token = listed.next_continuation_token().map(str::to_owned);
        if token.is_none() {
            break;
        }
    }
    Ok(format!("{removed} objects"))
}
