//! `fence qualify` against every local server: each qualifies (every property holds, with the
//! network faults where the proxy can sit in front), and leaves nothing behind; s3rver, a real
//! S3 server that ignores conditional writes, is refused without a run; settings the proxy
//! cannot serve are usage errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use fence_redis::redis;
use fence_testkit::s3 as s3_support;
use fence_testkit::{
    dynamodb as dynamodb_support, etcd as etcd_support, kafka as kafka_support,
    mysql as my_support, postgres as pg_support,
};
use serde_json::Value;
use support::fence;

/// A small run: 3 workers × 6 windows × 5 operations, a fixed seed.
const SIZE: [&str; 4] = ["--workers", "3", "--operations", "90"];
/// Under network faults: 3 workers × 20 windows × 5 operations, long enough that some faults
/// land on a request in flight (a pool absorbs those that only cut idle connections).
const SIZE_WITH_FAULTS: [&str; 5] = ["--workers", "3", "--operations", "300", "--network-faults"];
/// The seeds of the runs under faults: whether a fault lands on a request in flight depends on
/// timing too, so a run that lost nothing is followed by one with the next seed; every run
/// must qualify, and one of them must have lost answers or connections.
const FAULT_SEEDS: [&str; 3] = ["7", "8", "9"];

/// Runs `fence --json qualify BACKEND` and checks it qualified, property by property (under
/// network faults, until a run's faults reached the clients, at most [`FAULT_SEEDS`] runs).
fn qualifies(env: &[(&str, String)], backend: &str, network_faults: bool) -> Value {
    if !network_faults {
        return qualifies_once(env, backend, (&SIZE, "7"));
    }
    let mut undisturbed = Vec::new();
    for seed in FAULT_SEEDS {
        let json = qualifies_once(env, backend, (&SIZE_WITH_FAULTS, seed));
        assert!(
            !json["faults"].as_object().unwrap().is_empty(),
            "no fault injected: {json}"
        );
        // The faults reached the clients: some answers were lost or refused connections.
        let lost = json["ambiguous"]["total"].as_u64().unwrap() + json["failed"].as_u64().unwrap();
        if lost > 0 {
            return json;
        }
        undisturbed.push(json);
    }
    panic!(
        "the proxy disturbed nothing in {} runs: {undisturbed:?}",
        FAULT_SEEDS.len()
    );
}

/// One run with `size` and `seed`: qualified, every property held, its names removed.
fn qualifies_once(env: &[(&str, String)], backend: &str, (size, seed): (&[&str], &str)) -> Value {
    let mut args = vec!["--json", "qualify", backend, "--seed", seed];
    args.extend(size);
    let run = fence(env, &args, b"").expect(0);
    let json = run.json();
    assert_eq!(json["verdict"], "qualified", "{json}");
    let properties = json["properties"].as_array().unwrap();
    assert!(properties.len() >= 6, "{json}");
    assert!(properties.iter().all(|p| p["holds"] == true), "{json}");
    assert!(json["fenced"].as_u64().unwrap() > 0, "{json}");
    assert!(json["accepted"].as_u64().unwrap() > 0, "{json}");
    let removed: u64 = json["cleanup"]
        .as_str()
        .unwrap()
        .trim_start_matches("removed ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("{json}"));
    assert!(removed > 0, "the cleanup removed nothing: {json}");
    assert!(
        json["cleanup"].as_str().unwrap().starts_with("removed "),
        "{json}"
    );
    json
}

fn run_id(json: &Value) -> String {
    json["run"].as_str().unwrap().to_owned()
}

async fn keys_matching(url: &str, pattern: &str) -> usize {
    let mut connection = fence_testkit::redis::raw(url).await;
    let mut cursor = 0u64;
    let mut found = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .query_async(&mut connection)
            .await
            .unwrap();
        found += keys.len();
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

#[tokio::test]
async fn redis_qualifies_and_is_cleaned_up() {
    let (Some(url), Some(nodes)) = (
        fence_testkit::redis::shared_url(),
        fence_testkit::redis::shared_cluster(),
    ) else {
        return;
    };
    let prefix = fence_testkit::redis::unique_prefix("qualify");
    let env = vec![
        ("FENCE_REDIS_URL", url.clone()),
        ("FENCE_REDIS_PREFIX", prefix.clone()),
    ];
    // Neighbours outside the run's names, which the cleanup must leave alone.
    let mut raw = fence_testkit::redis::raw(&url).await;
    let neighbours = [
        format!("{prefix}:qualify-neighbour:x"),
        format!("{prefix}:keep"),
    ];
    for key in &neighbours {
        let () = redis::cmd("SET")
            .arg(key)
            .arg("v")
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let json = qualifies(&env, "redis", true);
    let pattern = format!("{prefix}:qualify-{}:*", run_id(&json));
    assert_eq!(keys_matching(&url, &pattern).await, 0, "{pattern} left");
    assert_eq!(
        keys_matching(&url, &format!("{prefix}:*")).await,
        2,
        "neighbours kept"
    );
    // A Redis Cluster: no proxy (it tells clients its nodes' addresses), cleanup on every node.
    let env = vec![
        ("FENCE_REDIS_CLUSTER", nodes.join(",")),
        ("FENCE_REDIS_PREFIX", prefix.clone()),
    ];
    let json = qualifies(&env, "redis", false);
    let pattern = format!("{prefix}:qualify-{}:*", run_id(&json));
    for node in &nodes {
        assert_eq!(
            keys_matching(node, &pattern).await,
            0,
            "{pattern} on {node}"
        );
    }
    let refused = fence(&env, &["qualify", "redis", "--network-faults"], b"").expect(2);
    assert!(refused.stderr.contains("Cluster"), "{}", refused.stderr);
}

fn s3_env(endpoint: &str, access: &str, secret: &str, prefix: &str) -> Vec<(&'static str, String)> {
    vec![
        ("FENCE_S3_ENDPOINT", endpoint.to_owned()),
        ("FENCE_S3_BUCKET", s3_support::BUCKET.into()),
        ("FENCE_S3_ACCESS_KEY", access.to_owned()),
        ("FENCE_S3_SECRET_KEY", secret.to_owned()),
        ("FENCE_S3_PREFIX", prefix.to_owned()),
    ]
}

async fn objects_under(client: &fence_s3::aws_sdk_s3::Client, prefix: &str) -> usize {
    let listed = client
        .list_objects_v2()
        .bucket(s3_support::BUCKET)
        .prefix(prefix)
        .send()
        .await
        .unwrap();
    listed.contents().len()
}

#[tokio::test]
async fn s3_qualifies_and_is_cleaned_up() {
    let Some(endpoint) = s3_support::shared_endpoint() else {
        return;
    };
    let prefix = s3_support::unique_prefix("qualify");
    let env = s3_env(
        &endpoint,
        s3_support::ACCESS_KEY,
        s3_support::SECRET_KEY,
        &prefix,
    );
    let client = s3_support::client(&endpoint);
    for key in [
        format!("{prefix}qualify-neighbour/x"),
        format!("{prefix}keep"),
    ] {
        client
            .put_object()
            .bucket(s3_support::BUCKET)
            .key(key)
            .body(b"v".to_vec().into())
            .send()
            .await
            .unwrap();
    }
    let json = qualifies(&env, "s3", true);
    let run_prefix = format!("{prefix}qualify-{}/", run_id(&json));
    assert_eq!(objects_under(&client, &run_prefix).await, 0, "{run_prefix}");
    assert_eq!(objects_under(&client, &prefix).await, 2, "neighbours kept");
}

#[tokio::test]
async fn an_s3_server_that_ignores_conditions_is_refused() {
    let Some(server) = s3_support::S3rver::start() else {
        return;
    };
    let env = s3_env(server.endpoint(), "S3RVER", "S3RVER", "");
    let mut args = vec!["--json", "qualify", "s3", "--seed", "7"];
    args.extend(SIZE);
    let run = fence(&env, &args, b"").expect(8);
    let json = run.json();
    assert_eq!(json["verdict"], "refused", "{json}");
    let reason = json["reason"].as_str().unwrap();
    assert!(reason.contains("ignores conditional writes"), "{reason}");
    assert!(json.get("operations").is_none(), "a run took place: {json}");
    // Text output says so too.
    let text = fence(&env, &["qualify", "s3"], b"").expect(8);
    assert!(text.stdout.contains("REFUSED"), "{}", text.stdout);
    drop(server);
}

#[tokio::test]
async fn postgres_qualifies_and_its_schema_is_dropped() {
    let Some(url) = pg_support::shared_url() else {
        return;
    };
    let schema = pg_support::unique_schema("qualify");
    let env = vec![
        ("FENCE_POSTGRES_URL", url.clone()),
        ("FENCE_POSTGRES_SCHEMA", schema.clone()),
    ];
    let json = qualifies(&env, "postgres", true);
    let pool = pg_support::pool(&url).await;
    let left: i64 = fence_postgres::sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
    )
    .bind(format!("{schema}_qualify_{}", run_id(&json)))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn mysql_qualifies_and_its_database_is_dropped() {
    let Some(url) = my_support::shared_url() else {
        return;
    };
    let database = my_support::unique_database("qualify");
    let env = vec![
        ("FENCE_MYSQL_URL", url.clone()),
        ("FENCE_MYSQL_DATABASE", database.clone()),
    ];
    let json = qualifies(&env, "mysql", true);
    let pool = my_support::pool(&url).await;
    let left: i64 = fence_mysql::sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
    )
    .bind(format!("{database}_qualify_{}", run_id(&json)))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn etcd_qualifies_and_is_cleaned_up() {
    let Some(endpoints) = etcd_support::shared_endpoints() else {
        return;
    };
    let prefix = etcd_support::unique_prefix("qualify");
    let env = vec![
        ("FENCE_ETCD_ENDPOINTS", endpoints[0].clone()),
        ("FENCE_ETCD_PREFIX", prefix.clone()),
    ];
    let mut client = fence_etcd::etcd_client::Client::connect(&endpoints, None)
        .await
        .unwrap();
    // A neighbour whose name merely starts like a run's, and one beside the runs.
    for key in [
        format!("{prefix}/qualify-neighbour/x"),
        format!("{prefix}/keep"),
    ] {
        client.put(key, "v", None).await.unwrap();
    }
    let json = qualifies(&env, "etcd", true);
    let left = client
        .get(
            prefix.as_str(),
            Some(
                fence_etcd::etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(left.count(), 2, "only the neighbours are left: {json}");
}

#[tokio::test]
async fn dynamodb_qualifies_and_is_cleaned_up() {
    let Some(dynamodb) = dynamodb_support::shared("qualify").await else {
        return;
    };
    let env = vec![
        (
            "FENCE_DYNAMODB_ENDPOINT",
            dynamodb_support::shared_endpoint().unwrap(),
        ),
        ("FENCE_DYNAMODB_TABLE", dynamodb.table().to_owned()),
        ("FENCE_DYNAMODB_NAMESPACE", "fence".to_owned()),
        ("FENCE_DYNAMODB_ACCESS_KEY", "fence-test".to_owned()),
        ("FENCE_DYNAMODB_SECRET_KEY", "fence-test".to_owned()),
    ];
    // A neighbour whose namespace merely starts like a run's, and an item beside the runs.
    let keep = ["fence.qualify-neighbour/x", "fence/keep"];
    for key in keep {
        dynamodb
            .client()
            .put_item()
            .table_name(dynamodb.table())
            .item("pk", AttributeValue::S(key.to_owned()))
            .send()
            .await
            .unwrap();
    }
    let json = qualifies(&env, "dynamodb", true);
    let scan = dynamodb
        .client()
        .scan()
        .table_name(dynamodb.table())
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let mut left: Vec<&str> = scan
        .items()
        .iter()
        .filter_map(|item| item.get("pk")?.as_s().ok().map(String::as_str))
        .collect();
    left.sort_unstable();
    assert_eq!(left, keep, "only the neighbours are left: {json}");
}

#[tokio::test]
async fn kafka_qualifies_and_its_topics_are_deleted() {
    let Some(bootstrap) = kafka_support::shared_bootstrap() else {
        return;
    };
    let topic = kafka_support::unique("qualify");
    let env = vec![
        ("FENCE_KAFKA_BOOTSTRAP", bootstrap.clone()),
        ("FENCE_KAFKA_TOPIC", topic.clone()),
    ];
    let json = qualifies(&env, "kafka", false);
    let properties = json["properties"].as_array().unwrap();
    assert!(
        properties
            .iter()
            .any(|p| p["property"] == "no fenced or failed batch visible"),
        "{json}"
    );
    let data = format!("{topic}-qualify-{}", run_id(&json));
    let consumer: BaseConsumer = kafka_support::client_config(&bootstrap).create().unwrap();
    let metadata = consumer
        .fetch_metadata(None, std::time::Duration::from_secs(10))
        .unwrap();
    assert!(
        metadata
            .topics()
            .iter()
            .all(|t| !t.name().starts_with(&data)),
        "{data} left"
    );
    let refused = fence(&env, &["qualify", "kafka", "--network-faults"], b"").expect(2);
    assert!(refused.stderr.contains("Kafka"), "{}", refused.stderr);
}
