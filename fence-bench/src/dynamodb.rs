//! DynamoDB: a fenced write (one conditional `UpdateItem` comparing the store version and the
//! mark) vs the least a fence on DynamoDB can send, a conditional `UpdateItem` of the value and
//! the mark (`attribute_not_exists(mark) OR mark <= :token`), of the same value. On moto, the
//! emulator the project runs: its figures say what the client adds, not what DynamoDB costs.

use std::collections::HashMap;
use std::sync::Arc;

use fence_core::{Domain, FencedStore, FencingToken, WriteRequest};
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_dynamodb::DynamoDb;

use crate::measure::{compare, done, Plan, CONCURRENCY};
use crate::probe::Probe;
use crate::report::Row;

pub(crate) async fn run() -> Vec<Row> {
    match run_cases().await {
        Ok(rows) => rows,
        Err(error) => vec![Row::note("dynamodb", "all cases", error)],
    }
}

async fn run_cases() -> Result<Vec<Row>, String> {
    let endpoint =
        std::env::var("FENCE_DYNAMODB_ENDPOINT").unwrap_or_else(|_| "http://127.0.0.1:8042".into());
    let table = format!("bench-{}", crate::measure::run_id());
    let client = fence_testkit::dynamodb::client(&endpoint);
    let dynamodb =
        DynamoDb::new(client.clone(), table.as_str(), "bench").map_err(|e| e.to_string())?;
    dynamodb.create_table().await.map_err(|e| e.to_string())?;
    let fence = dynamodb.fence();
    let domains: Arc<Vec<Domain>> = Arc::new(
        (0..64)
            .map(|i| Domain::new(format!("d{i}")))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?,
    );
    let payload = Arc::new(vec![b'x'; 1024]);
    let probe = Probe::server("dynamodb/moto.pid");
    let mut rows = Vec::new();
    for concurrency in CONCURRENCY {
        let plan = Plan {
            rounds: 8,
            batch: 100 * concurrency.min(4),
            concurrency,
            group: 1,
        };
        let (f, d, p) = (fence.clone(), domains.clone(), payload.clone());
        let (c, p2, t) = (client.clone(), payload.clone(), table.clone());
        let (fenced, unfenced) = compare(
            plan,
            &probe,
            move |i| {
                let fence = f.clone();
                let request =
                    WriteRequest::put(d[i % d.len()].clone(), FencingToken::MIN, p.to_vec());
                async move { done(fence.write(&request).await) }
            },
            move |i| {
                let request = c
                    .update_item()
                    .table_name(t.as_str())
                    .key("pk", AttributeValue::S(format!("plain/{}", i % 64)))
                    .condition_expression("attribute_not_exists(#m) OR #m <= :t")
                    .update_expression("SET #m = :t, #v = :v")
                    .set_expression_attribute_names(Some(HashMap::from([
                        ("#m".to_owned(), "mark".to_owned()),
                        ("#v".to_owned(), "val".to_owned()),
                    ])))
                    .expression_attribute_values(":t", AttributeValue::N("1".into()))
                    .expression_attribute_values(":v", AttributeValue::B(p2.to_vec().into()));
                async move { done(request.send().await) }
            },
        )
        .await;
        rows.push(Row::new(
            "dynamodb (moto)",
            "write 1 KiB vs conditional UpdateItem",
            concurrency,
            &fenced,
            &unfenced,
        ));
    }
    // Leave nothing behind.
    client
        .delete_table()
        .table_name(table.as_str())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(rows)
}
