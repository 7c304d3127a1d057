//! Injected broker error codes, on librdkafka's mock cluster (it does no real fencing, so it
//! serves only to provoke the error paths).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fence_core::{
    AppendRequest, BackendErrorKind, Domain, Fence, FenceError, FencedLog, FencingToken, Observed,
    Record,
};
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::rdkafka::mocking::MockCluster;
use fence_kafka::rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use fence_kafka::{KafkaFence, KafkaFenceError};
use fence_testkit::kafka::mock_fence;

async fn fence_on(
    mock: &MockCluster<'_, fence_kafka::rdkafka::producer::DefaultProducerContext>,
) -> Observed<KafkaFence> {
    mock_fence(mock, |b| b.timeout(Duration::from_secs(10))).await
}

/// A fence on `mock` that retries an aborted transaction twice, quickly.
async fn fence_with_two_retries(
    mock: &MockCluster<'_, fence_kafka::rdkafka::producer::DefaultProducerContext>,
) -> Observed<KafkaFence> {
    mock_fence(mock, |b| {
        b.timeout(Duration::from_secs(10))
            .aborted_retries(2)
            .retry_backoff(Duration::from_millis(5), Duration::from_millis(20))
    })
    .await
}

fn batch(domain: &Domain, value: &str) -> AppendRequest {
    AppendRequest::new(
        domain.clone(),
        FencingToken::new(3).unwrap(),
        vec![Record::new(value.to_owned())],
    )
}

/// A commit refused for a stale epoch after the broker acknowledged every record may have
/// committed anyway: on Apache Kafka when the first EndTxn answer is lost and the resend meets
/// an epoch another producer bumped meanwhile (the torture run's seed 61). This mock keeps no
/// transactions (acknowledged records are readable at once) and answers EndTxn with the
/// injected error, which is how such a commit looks: the fence must read the records back,
/// report them appended, and not write them a second time. (The aborted side needs a real
/// broker: `read_back_tests` in the crate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_commit_that_committed_is_reported_once_not_retried() {
    let mock = MockCluster::new(1).unwrap();
    // No retry of an aborted transaction: a fenced producer kept for the next append would
    // fail it.
    let fence = mock_fence(&mock, |b| {
        b.timeout(Duration::from_secs(10)).aborted_retries(0)
    })
    .await;
    let domain = Domain::new("orders").unwrap();
    fence.append(&batch(&domain, "first")).await.unwrap();
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH],
    );
    let outcome = fence
        .append(&batch(&domain, "second"))
        .await
        .expect("read back as committed");
    assert_eq!(outcome.appended().records, 1);
    assert_eq!(values(&fence, &domain).await, ["first", "second"]);
    // The refused producer is not reused: the next append opens another and commits.
    fence.append(&batch(&domain, "third")).await.unwrap();
    assert_eq!(values(&fence, &domain).await, ["first", "second", "third"]);
}

/// The same for a claim (the torture run's case): a claim whose refused commit committed
/// reports the mark it raised from, never its own token as the previous mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_claim_that_committed_reports_the_mark_it_raised() {
    let mock = MockCluster::new(1).unwrap();
    let fence = fence_on(&mock).await;
    let domain = Domain::new("orders").unwrap();
    let token = |n| FencingToken::new(n).unwrap();
    fence.claim(&domain, token(2)).await.unwrap();
    mock.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED],
    );
    let claimed = fence.claim(&domain, token(3)).await.expect("read back");
    assert_eq!(claimed.previous_high_water_mark, Some(token(2)));
    assert_eq!(
        fence
            .committed_ledger(&domain)
            .await
            .unwrap()
            .high_water_mark,
        Some(token(3))
    );
}

/// The values of the domain's committed records, in order.
async fn values(fence: &Observed<KafkaFence>, domain: &Domain) -> Vec<String> {
    fence
        .read_log(domain)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| String::from_utf8(entry.record.value.to_vec()).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abortable_produce_error_aborts_and_retries_without_duplicates() {
    let mock = MockCluster::new(1).unwrap();
    let fence = fence_on(&mock).await;
    let domain = Domain::new("orders").unwrap();
    fence.append(&batch(&domain, "first")).await.unwrap();
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    fence
        .append(&batch(&domain, "second"))
        .await
        .expect("aborted, then retried");
    assert_eq!(values(&fence, &domain).await, ["first", "second"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorised_transactional_id_is_a_backend_error_not_a_fence() {
    let mock = MockCluster::new(1).unwrap();
    let fence = fence_on(&mock).await;
    mock.request_errors(
        RDKafkaApiKey::InitProducerId,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED],
    );
    let result = fence
        .claim(
            &Domain::new("orders").unwrap(),
            FencingToken::new(1).unwrap(),
        )
        .await;
    match result {
        Err(
            ref error @ FenceError::Backend {
                ref source, kind, ..
            },
        ) => {
            assert!(
                source.downcast_ref::<KafkaFenceError>().is_some(),
                "{source}"
            );
            assert_eq!(kind, BackendErrorKind::PermissionDenied, "{error}");
            assert!(
                !error.is_retryable(),
                "an ACL refusal cannot be retried away"
            );
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_transactions_is_a_backend_error() {
    let mock = MockCluster::new(1).unwrap();
    let fence = fence_on(&mock).await;
    mock.apiversion(RDKafkaApiKey::InitProducerId, None, None)
        .unwrap();
    let domain = Domain::new("orders").unwrap();
    let claim = fence.claim(&domain, FencingToken::new(1).unwrap()).await;
    assert!(
        matches!(claim, Err(FenceError::Backend { .. })),
        "{claim:?}"
    );
    let append = fence.append(&batch(&domain, "x")).await;
    assert!(
        matches!(append, Err(FenceError::Backend { .. })),
        "{append:?}"
    );
    for result in [claim.map(|_| ()), append.map(|_| ())] {
        assert!(
            result.as_ref().is_err_and(|e| !e.is_retryable()),
            "a broker without transactions never will have them: {result:?}"
        );
    }
}

/// A claim (2 retries allowed) whose ledger record the broker refuses with `error` every time.
async fn claim_refused_three_times(
    error: RDKafkaRespErr,
) -> Result<fence_core::Claimed, FenceError> {
    let mock = MockCluster::new(1).unwrap();
    let fence = fence_with_two_retries(&mock).await;
    mock.request_errors(RDKafkaApiKey::Produce, &[error, error, error]);
    fence
        .claim(
            &Domain::new("orders").unwrap(),
            FencingToken::new(4).unwrap(),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_keeps_losing_its_transaction_says_so_and_is_contention() {
    // Each attempt's ledger record is refused as from a fenced producer, as when claimers keep
    // re-initialising the id (the mock fences nothing itself).
    match claim_refused_three_times(RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH).await
    {
        Err(
            ref error @ FenceError::Backend {
                ref source, kind, ..
            },
        ) => {
            assert!(
                matches!(
                    source.downcast_ref::<KafkaFenceError>(),
                    Some(KafkaFenceError::ClaimContended { attempts: 3 })
                ),
                "{source}"
            );
            let text = error.to_string();
            assert!(
                text.contains("claim") && !text.contains("operation id"),
                "{text}"
            );
            assert_eq!(kind, BackendErrorKind::Contention);
            assert!(!error.is_retryable());
        }
        other => panic!("expected ClaimContended after 3 attempts, got {other:?}"),
    }

    // Aborts that are not contention are retried as well, but reported as what they were.
    match claim_refused_three_times(RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE).await {
        Err(FenceError::Backend { ref source, .. }) => assert!(
            matches!(
                source.downcast_ref::<KafkaFenceError>(),
                Some(KafkaFenceError::Kafka(_))
            ),
            "the broker's own error, not contention: {source}"
        ),
        other => panic!("expected the broker's error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_topic_that_cannot_be_created_fails_connect() {
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("events", 1, 1).unwrap();
    mock.apiversion(RDKafkaApiKey::CreateTopics, None, None)
        .unwrap();
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", mock.bootstrap_servers());
    let result = KafkaFence::builder(config)
        .data_topic("events")
        .ledger_topic("missing-ledger")
        .timeout(Duration::from_secs(3))
        .connect()
        .await;
    assert!(
        matches!(result, Err(FenceError::Backend { .. })),
        "{result:?}"
    );
}
