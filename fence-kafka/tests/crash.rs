//! A broker crash right after an acknowledged claim, on Apache Kafka (a single KRaft node
//! killed with kill -9 and restarted on its data).
//!
//! The coordinator acknowledges a commit before its markers reach the partitions; reloading
//! the transaction after the crash, Apache Kafka skips the markers of a partition whose leader
//! it does not know yet, and the claim's ledger record stays undecided. Measured before the
//! fix: the claim of 9 was invisible after the restart and a zombie's token 8 was accepted. A
//! mark is now acknowledged only once its markers are in the ledger partition.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::token as t;
use fence_core::{AppendRequest, Domain, Fence, FenceError, FencedLog, Record};
use fence_testkit::kafka as support;
use fence_testkit::kafka_broker::KafkaServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_acknowledged_just_before_a_crash_stays_in_force() {
    let Some(server) = KafkaServer::start("claim-crash") else {
        return;
    };
    let owner = support::fence_on(&server.bootstrap(), "claim-crash").await;
    let topic = owner.data_topic().to_owned();
    let config = support::client_config(&server.bootstrap());
    let process = || support::fence_builder(&config, &topic).build().unwrap();
    for round in 0..3u64 {
        let domain = Domain::new(format!("claimed-{round}")).unwrap();
        owner.claim(&domain, t(9)).await.unwrap();
        server.restart(); // at once: the markers' fate is decided by the broker's reload
        let zombie = AppendRequest::new(domain.clone(), t(8), vec![Record::new("zombie")]);
        match process().append(&zombie).await {
            Err(FenceError::Fenced { current, .. }) => assert_eq!(current, t(9)),
            other => panic!("round {round}: token 8 after an acknowledged claim of 9: {other:?}"),
        }
        assert_eq!(
            process().high_water_mark(&domain).await.unwrap(),
            Some(t(9))
        );
        assert!(process().read_log(&domain).await.unwrap().is_empty());
    }
}
