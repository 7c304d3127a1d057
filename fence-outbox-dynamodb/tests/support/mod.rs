//! Test support for the DynamoDB outbox: tables on the shared moto server (the fence's, the
//! outbox's and an `orders` table for the transitions' own state change), relays leased from
//! the fence's table.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    // Each test binary uses its own part of this module.
    unused_imports
)]

pub use fence_conformance::relay::OutboxUnderTest;
pub use fence_conformance::relay_kit::*;
pub use fence_conformance::services::{domain, token};

use std::sync::Arc;
use std::time::{Duration, Instant};

use fence_core::{Domain, FencingToken, LeaseManager, TransactionRequest};
use fence_dynamodb::aws_sdk_dynamodb::error::ProvideErrorMetadata;
use fence_dynamodb::aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use fence_dynamodb::DynamoDb;
use fence_outbox::{Effect, OutboxEntry, OutboxError, OutboxStore, Relay, RelayConfig, Sink};
use fence_outbox_dynamodb::DynamoDbOutbox;

/// An outbox in fresh tables on the shared server.
pub async fn outbox(test: &str) -> Option<DynamoDbOutbox> {
    let dynamodb = fence_testkit::dynamodb::shared(test).await?;
    let outbox = DynamoDbOutbox::new(
        dynamodb.fence(),
        format!("{}-outbox", dynamodb.table()),
        kinds(),
    )
    .unwrap();
    outbox.create_table().await.unwrap();
    DynamoDb::new(dynamodb.client().clone(), orders_table(&outbox), "orders")
        .unwrap()
        .create_table()
        .await
        .unwrap();
    Some(outbox)
}

/// The table of the transitions' own items.
pub fn orders_table(outbox: &DynamoDbOutbox) -> String {
    format!("{}-orders", outbox.fence().dynamodb().table())
}

/// The action that marks `domain`'s order paid by `token`.
pub fn mark_paid(
    outbox: &DynamoDbOutbox,
    domain: &Domain,
    token: FencingToken,
) -> TransactWriteItem {
    let order = Put::builder()
        .table_name(orders_table(outbox))
        .item("pk", AttributeValue::S(domain.as_str().to_owned()))
        .item("status", AttributeValue::S(format!("paid by {token}")))
        .build()
        .unwrap();
    TransactWriteItem::builder().put(order).build()
}

/// Marks the order paid and records one receipt effect to `url`, in one fenced transition;
/// how many entries it recorded (0 when the op id had committed before).
pub async fn pay(
    outbox: &DynamoDbOutbox,
    domain: &Domain,
    token: FencingToken,
    op_id: &str,
    url: &str,
    payload: &str,
) -> Result<usize, OutboxError> {
    let request = TransactionRequest::new(domain.clone(), token).with_op_id(op(op_id));
    let effect = Effect::new("send-receipt-email", url, payload.to_owned());
    let recorded = outbox
        .transition(&request, vec![mark_paid(outbox, domain, token)], &[effect])
        .await?;
    Ok(recorded.keys.len())
}

/// The order's status as the orders table holds it.
pub async fn order_status(outbox: &DynamoDbOutbox, domain: &Domain) -> Option<String> {
    let item = outbox
        .fence()
        .dynamodb()
        .client()
        .get_item()
        .table_name(orders_table(outbox))
        .key("pk", AttributeValue::S(domain.as_str().to_owned()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item?;
    item.get("status").and_then(|s| s.as_s().ok()).cloned()
}

/// The progress item of `domain`, as the outbox table holds it (fence-testkit's one raw read,
/// on a handle of the outbox's table).
pub async fn progress_item(
    outbox: &DynamoDbOutbox,
    domain: &Domain,
) -> Option<std::collections::HashMap<String, AttributeValue>> {
    let fence = outbox.fence().dynamodb();
    let table = DynamoDb::new(fence.client().clone(), outbox.table(), fence.namespace()).unwrap();
    fence_testkit::dynamodb::raw_item(&table, &fence.item_key(domain)).await
}

/// The outbox as the relay contract drives it.
pub struct DynamoDbUnderTest {
    pub outbox: DynamoDbOutbox,
}

/// A fresh outbox on the shared server.
pub async fn under_test(test: &str) -> Option<DynamoDbUnderTest> {
    Some(DynamoDbUnderTest {
        outbox: outbox(test).await?,
    })
}

#[async_trait::async_trait]
impl OutboxUnderTest for DynamoDbUnderTest {
    async fn pay(
        &self,
        domain: &Domain,
        token: FencingToken,
        op_id: &str,
        url: &str,
        payload: &str,
    ) -> Result<usize, OutboxError> {
        pay(&self.outbox, domain, token, op_id, url, payload).await
    }

    async fn entries(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        self.outbox.entries(domain).await
    }

    async fn dead_letters(&self, domain: &Domain) -> Result<Vec<OutboxEntry>, OutboxError> {
        self.outbox.dead_letters(domain).await
    }

    async fn discard_dead_letter(&self, domain: &Domain, seq: u64) -> Result<bool, OutboxError> {
        self.outbox.discard_dead_letter(domain, seq).await
    }

    fn relay(&self, sink: Arc<dyn Sink>, config: RelayConfig) -> Result<Relay, OutboxError> {
        let leases: Arc<dyn LeaseManager> = Arc::new(self.outbox.fence().dynamodb().leases());
        Relay::new(Arc::new(self.outbox.clone()), sink, leases, config)
    }

    fn store(&self) -> Result<Arc<dyn OutboxStore>, OutboxError> {
        Ok(Arc::new(self.outbox.clone()))
    }

    /// Removes the lease record from the lease domain's item, as a release would: DynamoDB has
    /// no clock to let it run out, and a contender would otherwise watch it for its TTL. No
    /// lease recorded (none taken yet, or released): nothing to end.
    async fn expire_relay_lease(&self) {
        let lease_domain = fast_relay("x").lease_domain().unwrap();
        let dynamodb = self.outbox.fence().dynamodb();
        let ended = dynamodb
            .client()
            .update_item()
            .table_name(dynamodb.table())
            .key("pk", AttributeValue::S(dynamodb.item_key(&lease_domain)))
            .condition_expression("attribute_exists(#owner)")
            .update_expression("REMOVE #owner, #ltok, #rvn, #ttl")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#ltok", "ltok")
            .expression_attribute_names("#rvn", "rvn")
            .expression_attribute_names("#ttl", "ttl")
            .send()
            .await;
        if let Err(error) = ended {
            let code = error.as_service_error().and_then(|e| e.meta().code());
            assert_eq!(code, Some("ConditionalCheckFailedException"), "{error:?}");
        }
    }

    /// A drained domain leaves the `pending` index (its `pend` attribute goes).
    async fn check_purged(&self, domain: &Domain) {
        let started = Instant::now();
        loop {
            let item = progress_item(&self.outbox, domain).await.unwrap();
            if !item.contains_key("pend") {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "still listed as pending: {item:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
