//! DynamoDB: the shared moto server `scripts/test` starts (in memory, one request at a time),
//! clients of it, and a fresh table per test.

use std::time::Duration;

use fence_dynamodb::aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use fence_dynamodb::aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_dynamodb::aws_sdk_dynamodb::{Client, Config};
use fence_dynamodb::DynamoDb;

use crate::{listens, unavailable};

/// The shared server's endpoint (`FENCE_DYNAMODB_ENDPOINT`), if it listens.
pub fn shared_endpoint() -> Option<String> {
    let endpoint =
        std::env::var("FENCE_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8042".into());
    let address = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    if crate::shared_server_answers(&endpoint, || listens(&address)) {
        Some(endpoint)
    } else {
        unavailable(&format!("the shared DynamoDB (moto) at {endpoint}")).map(|_| String::new())
    }
}

/// A client of `endpoint` with test credentials, and timeouts that report a stopped server
/// within seconds (a busy single-threaded moto still answers well within them).
pub fn client(endpoint: &str) -> Client {
    client_with_timeout(endpoint, Duration::from_secs(20))
}

/// A client of `endpoint` whose requests give up after `attempt` (a fault proxy's black hole
/// costs that much).
pub fn client_with_timeout(endpoint: &str, attempt: Duration) -> Client {
    let config = Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(
            "fence-test",
            "fence-test",
            None,
            None,
            "fence-testkit",
        ))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_attempt_timeout(attempt)
                .build(),
        )
        .build();
    Client::from_conf(config)
}

/// A table name of its own for `test`.
pub fn unique_table(test: &str) -> String {
    let test: String = test
        .chars()
        .take(40)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("ft-{test}-{}", crate::unique_suffix())
}

/// A fresh table named after `test` on the shared server, under namespace `fence` (`None`: a
/// loud skip outside the test command).
pub async fn shared(test: &str) -> Option<DynamoDb> {
    let endpoint = shared_endpoint()?;
    let dynamodb =
        DynamoDb::new(client(&endpoint), unique_table(test), "fence").expect("a valid table");
    dynamodb
        .create_table()
        .await
        .expect("create the test's table");
    Some(dynamodb)
}

/// The same table and namespace as `dynamodb` through a client of its own (another process's
/// view: its own caches and sightings).
pub fn another_client(dynamodb: &DynamoDb) -> DynamoDb {
    let endpoint = shared_endpoint().expect("the shared DynamoDB");
    DynamoDb::new(client(&endpoint), dynamodb.table(), dynamodb.namespace()).expect("a valid table")
}

/// The same table and namespace through a client of an address where nothing listens.
pub fn unreachable(dynamodb: &DynamoDb) -> DynamoDb {
    DynamoDb::new(
        client("http://127.0.0.1:1"),
        dynamodb.table(),
        dynamodb.namespace(),
    )
    .expect("a valid table")
}

/// The item whose partition key is `key` in `dynamodb`'s table, as DynamoDB holds it now
/// (strongly consistent), read around Fence: what a test checks Fence left there.
pub async fn raw_item(
    dynamodb: &DynamoDb,
    key: &str,
) -> Option<std::collections::HashMap<String, AttributeValue>> {
    dynamodb
        .client()
        .get_item()
        .table_name(dynamodb.table())
        .key("pk", AttributeValue::S(key.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("read the item")
        .item
}
