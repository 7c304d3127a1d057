//! `KafkaFence::check_permissions`: on the shared broker (no authorizer configured) everything is
//! granted and nothing the probe wrote is visible; on librdkafka's mock cluster, authorization
//! errors injected per request are reported as the ACL they stand for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fence_core::permissions::{Access, PermissionReport};
use fence_core::Observed;
use fence_kafka::rdkafka::mocking::MockCluster;
use fence_kafka::rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use fence_kafka::KafkaFence;
use fence_testkit::kafka as support;

fn access(report: &PermissionReport, name: &str) -> Access {
    report
        .access(name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_broker_everything_is_granted_and_nothing_is_left_visible() {
    let Some(fence) = support::shared_fence("permissions").await else {
        return;
    };
    let report = fence.check_permissions().await.unwrap();
    println!("{report}");
    assert!(report.all_granted(), "{report}");
    assert_eq!(report.permissions.len(), 6);
    // The probe's records were in an aborted transaction: read_committed sees none.
    let partitions = fence.data_partition_count().await.unwrap();
    for partition in 0..partitions {
        assert!(fence.read_committed(partition, 0).await.unwrap().is_empty());
    }
}

async fn mock_fence(
    mock: &MockCluster<'_, fence_kafka::rdkafka::producer::DefaultProducerContext>,
) -> Observed<KafkaFence> {
    support::mock_fence(mock, |b| {
        b.timeout(Duration::from_secs(5))
            .transaction_timeout(Duration::from_secs(5))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_transactional_id_is_named() {
    let mock = MockCluster::new(1).unwrap();
    let fence = mock_fence(&mock).await;
    mock.request_errors(
        RDKafkaApiKey::InitProducerId,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED],
    );
    let report = fence.check_permissions().await.unwrap();
    println!("{report}");
    assert!(
        matches!(
            access(&report, "Write on TransactionalId fence:!permission-probe"),
            Access::Denied(_)
        ),
        "{report}"
    );
    assert!(matches!(
        access(&report, "Write on Topic events"),
        Access::Unknown(_)
    ));
    assert_eq!(access(&report, "Describe on Topic events"), Access::Granted);
    assert_eq!(
        access(&report, "Read on Topic fence-ledger"),
        Access::Granted
    );
    assert_eq!(report.denied().count(), 1, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_topic_write_is_named() {
    let mock = MockCluster::new(1).unwrap();
    let fence = mock_fence(&mock).await;
    mock.request_errors(
        RDKafkaApiKey::AddPartitionsToTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    let report = fence.check_permissions().await.unwrap();
    println!("{report}");
    let denied: Vec<&str> = report.denied().map(|p| p.name.as_str()).collect();
    assert!(!denied.is_empty(), "{report}");
    assert!(
        denied.iter().all(|name| name.starts_with("Write on Topic")),
        "{report}"
    );
    assert_eq!(
        access(&report, "Write on TransactionalId fence:!permission-probe"),
        Access::Granted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_describe_is_named_not_taken_for_a_missing_topic() {
    let mock = MockCluster::new(1).unwrap();
    let fence = mock_fence(&mock).await;
    mock.topic_error(
        "events",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
    )
    .unwrap();
    let report = fence.check_permissions().await.unwrap();
    println!("{report}");
    assert!(
        matches!(
            access(&report, "Describe on Topic events"),
            Access::Denied(_)
        ),
        "{report}"
    );
    assert_eq!(
        access(&report, "Describe on Topic fence-ledger"),
        Access::Granted
    );
}
