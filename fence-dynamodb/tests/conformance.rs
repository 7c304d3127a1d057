//! The conformance suite on DynamoDB (moto's server mode in the test command), a fresh table
//! per scenario; and the declared capabilities, pinned.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use fence_conformance::{NotApplicable, StatePart, StoreHarness};
use fence_core::{BoxError, Domain, FencedStore, Observed};
use fence_dynamodb::aws_sdk_dynamodb::types::AttributeValue;
use fence_dynamodb::{DynamoDb, DynamoDbFence};
use fence_testkit::dynamodb::{another_client, shared, unreachable};

fn fence(dynamodb: &DynamoDb) -> Observed<DynamoDbFence> {
    dynamodb
        .fence_builder()
        .max_value_bytes(64 * 1024)
        .build()
        .expect("valid limits")
}

struct Harness {
    dynamodb: DynamoDb,
    store: Observed<DynamoDbFence>,
}

#[async_trait]
impl StoreHarness for Harness {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.store.clone())
    }

    fn holder(&self) -> Arc<dyn FencedStore> {
        // Another process's client: its own cache of what it last saw.
        Arc::new(fence(&another_client(&self.dynamodb)))
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(fence(&unreachable(&self.dynamodb))))
    }

    /// Sets one attribute of the domain's item, going around Fence: a mark that is a string,
    /// or an entry record of a kind Fence never writes.
    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let (name, value) = match part {
            StatePart::Mark => ("mark", AttributeValue::S("02".into())),
            StatePart::Entry => ("entry", AttributeValue::S("maybe 2 1".into())),
            _ => return Ok(false),
        };
        self.dynamodb
            .client()
            .update_item()
            .table_name(self.dynamodb.table())
            .key("pk", AttributeValue::S(self.dynamodb.item_key(domain)))
            .update_expression("SET #a = :v")
            .set_expression_attribute_names(Some(HashMap::from([("#a".into(), name.into())])))
            .set_expression_attribute_values(Some(HashMap::from([(":v".into(), value)])))
            .send()
            .await?;
        Ok(true)
    }

    /// The qualification the issue set for an emulator: 8 writers racing conditional writes,
    /// 30 rounds, exactly one winner each (strict policy, one token per round).
    fn race_writers(&self) -> usize {
        8
    }

    fn race_rounds(&self) -> usize {
        30
    }

    fn not_applicable(&self) -> NotApplicable {
        &[(
            "state_survives_restart",
            "moto keeps its tables in memory: a restart loses them (DynamoDB itself is durable; \
             no emulator here can show it)",
        )]
    }
}

async fn harness() -> Option<Harness> {
    let dynamodb = shared("conformance").await?;
    Some(Harness {
        store: fence(&dynamodb),
        dynamodb,
    })
}

fence_conformance::store_conformance!(harness);

#[tokio::test]
async fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention};
    // No I/O: nothing needs to listen.
    let caps = fence(&unreachable_handle()).capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(
                fence_dynamodb::DEFAULT_OP_ID_RETENTION
            ))
            .with_max_value_bytes(Some(64 * 1024))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    assert!(caps.write && caps.delete && caps.read && caps.claim && !caps.append);
    assert!(caps.revision_cas && caps.strict_policy && caps.op_id_replay());
}

fn unreachable_handle() -> DynamoDb {
    DynamoDb::new(
        fence_testkit::dynamodb::client("http://127.0.0.1:1"),
        "ft-none",
        "fence",
    )
    .expect("valid names")
}
