//! A worker takes a DynamoDB lease, then updates an order item and a ledger item in one fenced
//! transaction. It stalls past its lease; a second worker (another process: its own client)
//! sees the lease unrenewed for its whole duration, takes it over with a greater token and
//! commits. The first wakes up and commits with its old token: DynamoDB cancels the whole
//! transaction, and neither the order nor the ledger holds anything of it.
//!
//! `cargo run -p fence-dynamodb --example dynamodb_worker` against `FENCE_DYNAMODB_ENDPOINT`
//! (the project's moto: `scripts/services up`). The run's two tables are deleted at the end.

use std::error::Error;
use std::time::{Duration, Instant};

use fence_core::{Domain, FenceError, LeaseManager, OwnerId, TransactionRequest};
use fence_dynamodb::aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use fence_dynamodb::aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use fence_dynamodb::aws_sdk_dynamodb::{Client, Config};
use fence_dynamodb::DynamoDb;

const TTL: Duration = Duration::from_secs(2);

fn client(endpoint: &str) -> Client {
    Client::from_conf(
        Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(endpoint)
            .credentials_provider(Credentials::new(
                "example", "example", None, None, "example",
            ))
            .build(),
    )
}

/// The order's new state and a ledger line, in the caller's own table.
fn order_and_ledger(
    table: &str,
    state: &str,
    line: &str,
) -> Result<Vec<TransactWriteItem>, Box<dyn Error>> {
    let order = Update::builder()
        .table_name(table)
        .key("pk", AttributeValue::S("order/o-17".into()))
        .update_expression("SET #s = :s")
        .expression_attribute_names("#s", "state")
        .expression_attribute_values(":s", AttributeValue::S(state.into()))
        .build()?;
    let ledger = Update::builder()
        .table_name(table)
        .key("pk", AttributeValue::S("ledger/o-17".into()))
        .update_expression("SET #l = list_append(if_not_exists(#l, :none), :line)")
        .expression_attribute_names("#l", "lines")
        .expression_attribute_values(":none", AttributeValue::L(vec![]))
        .expression_attribute_values(
            ":line",
            AttributeValue::L(vec![AttributeValue::S(line.into())]),
        )
        .build()?;
    Ok(vec![
        TransactWriteItem::builder().update(order).build(),
        TransactWriteItem::builder().update(ledger).build(),
    ])
}

async fn run(fence_table: &DynamoDb, orders: &DynamoDb) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    let say = |who: &str, what: String| {
        println!("{:>6} ms  {who:<9} {what}", started.elapsed().as_millis())
    };
    let domain = Domain::new("orders/o-17")?;

    // Worker 1's fence remembers what it last wrote: when it wakes it decides on that, and
    // DynamoDB's condition on the order's domain item is what refuses it.
    let (worker_1, fence_1) = (fence_table.leases(), fence_table.fence());
    let lease_1 = worker_1
        .acquire(&domain, &OwnerId::new("worker-1")?, TTL)
        .await?;
    say(
        "worker-1",
        format!("holds the lease with token {}", lease_1.token),
    );
    fence_1
        .transact(
            &TransactionRequest::new(domain.clone(), lease_1.token),
            order_and_ledger(
                orders.table(),
                "paid",
                &format!("paid by token {}", lease_1.token),
            )?,
        )
        .await?;
    say(
        "worker-1",
        "committed: order paid, ledger line written".into(),
    );
    say(
        "worker-1",
        format!("stalls (a GC pause) past its {TTL:?} lease"),
    );

    // Worker 2 is another process: its own client, its own sightings of the lease.
    let other = DynamoDb::new(
        fence_table.client().clone(),
        fence_table.table(),
        fence_table.namespace(),
    )?;
    let worker_2 = other.leases();
    let lease_2 = loop {
        match worker_2
            .acquire(&domain, &OwnerId::new("worker-2")?, TTL)
            .await
        {
            Ok(lease) => break lease,
            Err(FenceError::LeaseHeld { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(other) => return Err(other.into()),
        }
    };
    say(
        "worker-2",
        format!(
            "saw the lease unrenewed for {TTL:?}; took it over with token {}",
            lease_2.token
        ),
    );
    other
        .fence()
        .transact(
            &TransactionRequest::new(domain.clone(), lease_2.token),
            order_and_ledger(
                orders.table(),
                "shipped",
                &format!("shipped by token {}", lease_2.token),
            )?,
        )
        .await?;
    say("worker-2", "committed: order shipped".into());

    let late = fence_1
        .transact(
            &TransactionRequest::new(domain.clone(), lease_1.token),
            order_and_ledger(
                orders.table(),
                "refunded",
                &format!("refunded by token {}", lease_1.token),
            )?,
        )
        .await;
    match late {
        Err(FenceError::Fenced { presented, current, .. }) => {
            say("worker-1", format!("wakes, commits with token {presented}: cancelled (the mark is {current}); nothing written"))
        }
        other => return Err(format!("the stalled worker's transaction was not refused: {other:?}").into()),
    }
    let order = orders
        .client()
        .get_item()
        .table_name(orders.table())
        .key("pk", AttributeValue::S("order/o-17".into()))
        .consistent_read(true)
        .send()
        .await?;
    let state = order
        .item()
        .and_then(|i| i.get("state"))
        .and_then(|s| s.as_s().ok())
        .cloned();
    if state.as_deref() != Some("shipped") {
        return Err(format!("the order is {state:?}, not shipped").into());
    }
    let ledger = orders
        .client()
        .get_item()
        .table_name(orders.table())
        .key("pk", AttributeValue::S("ledger/o-17".into()))
        .consistent_read(true)
        .send()
        .await?;
    let lines = ledger
        .item()
        .and_then(|i| i.get("lines"))
        .and_then(|l| l.as_l().ok())
        .map_or(0, Vec::len);
    if lines != 2 {
        return Err(format!("the ledger holds {lines} lines, not the 2 committed").into());
    }
    say(
        "orders",
        "o-17 is shipped; the ledger holds the two committed lines only".into(),
    );
    worker_2.release(&lease_2).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let endpoint =
        std::env::var("FENCE_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8042".into());
    let client = client(&endpoint);
    let run_id = std::process::id();
    let fence_table = DynamoDb::new(client.clone(), format!("fence-example-{run_id}"), "example")?;
    let orders = DynamoDb::new(client.clone(), format!("orders-example-{run_id}"), "unused")?;
    fence_table.create_table().await.map_err(|e| {
        format!("DynamoDB at {endpoint} ({e}): start it with `scripts/services up`")
    })?;
    orders.create_table().await?;
    let result = run(&fence_table, &orders).await;
    for table in [fence_table.table(), orders.table()] {
        client.delete_table().table_name(table).send().await?;
    }
    println!(
        "cleaned up: tables {} and {} deleted",
        fence_table.table(),
        orders.table()
    );
    result
}
