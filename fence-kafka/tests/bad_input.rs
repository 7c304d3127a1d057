//! Bad input against Kafka: typed errors before any I/O, and a corrupt ledger fails closed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_testkit::kafka as support;

use std::time::Duration;

use fence_core::{
    AppendRequest, Domain, Fence, FenceError, FencedLog, FencingToken, InvalidInput, Record,
};
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use fence_kafka::KafkaFence;

#[test]
fn bad_configuration_is_refused_without_io() {
    let refused = |config: ClientConfig, topic: &str| {
        matches!(
            KafkaFence::builder(config).data_topic(topic).build(),
            Err(FenceError::InvalidInput(InvalidInput::Configuration(_)))
        )
    };
    let mut good = ClientConfig::new();
    good.set("bootstrap.servers", "127.0.0.1:1");
    assert!(
        refused(ClientConfig::new(), "events"),
        "no bootstrap servers"
    );
    assert!(refused(good.clone(), "bad topic/name"));
    assert!(refused(good.clone(), ""));
    let mut with_txn = good.clone();
    with_txn.set("transactional.id", "mine");
    assert!(
        refused(with_txn, "events"),
        "a user transactional.id would defeat the per-domain ids"
    );
    assert!(
        KafkaFence::builder(good.clone()).build().is_err(),
        "no data topic"
    );
    let mut secret = good;
    secret.set("sasl.password", "hunter2");
    let fence = KafkaFence::builder(secret)
        .data_topic("events")
        .build()
        .unwrap();
    assert!(
        !format!("{fence:?}").contains("hunter2"),
        "no secrets in Debug"
    );
}

#[tokio::test]
async fn empty_and_oversized_batches_are_refused_before_any_io() {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", "127.0.0.1:1");
    let fence = KafkaFence::builder(config)
        .data_topic("events")
        .max_batch_bytes(10)
        .build()
        .unwrap();
    let domain = Domain::new("d").unwrap();
    let token = FencingToken::new(1).unwrap();
    let empty = fence
        .append(&AppendRequest::new(domain.clone(), token, Vec::new()))
        .await;
    assert!(
        matches!(
            empty,
            Err(FenceError::InvalidInput(InvalidInput::EmptyBatch { .. }))
        ),
        "{empty:?}"
    );
    let big = fence
        .append(&AppendRequest::new(
            domain,
            token,
            vec![Record::new(vec![0u8; 11])],
        ))
        .await;
    assert!(
        matches!(
            big,
            Err(FenceError::InvalidInput(InvalidInput::ValueTooLarge {
                size: 11,
                max: 10,
                ..
            }))
        ),
        "{big:?}"
    );
}

#[tokio::test]
async fn an_unreachable_broker_is_a_backend_error() {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", "127.0.0.1:1")
        .set("socket.connection.setup.timeout.ms", "1000");
    let result = KafkaFence::builder(config)
        .data_topic("events")
        .timeout(Duration::from_secs(3))
        .connect()
        .await;
    assert!(
        matches!(result, Err(FenceError::Backend { .. })),
        "{result:?}"
    );
    let error = result.err().unwrap();
    assert_eq!(
        error.backend_kind(),
        Some(fence_core::BackendErrorKind::Unavailable),
        "{error}"
    );
    assert!(error.is_retryable(), "a broker that is down may come back");
}

#[tokio::test]
async fn a_corrupt_ledger_record_fails_closed() {
    let Some(fence) = support::shared_fence("corrupt-ledger").await else {
        return;
    };
    let bootstrap = support::shared_bootstrap().unwrap();
    let domain = Domain::new("orders").unwrap();
    let plain: BaseProducer = support::client_config(&bootstrap).create().unwrap();
    plain
        .send(
            BaseRecord::<str, [u8]>::to(&format!("{}-ledger", fence.data_topic()))
                .key(domain.as_str())
                .payload(b"hwm=99 (not ours)"),
        )
        .unwrap();
    plain.flush(Duration::from_secs(5)).unwrap();
    let token = FencingToken::new(5).unwrap();
    for result in [
        fence.claim(&domain, token).await.map(|_| ()),
        fence.high_water_mark(&domain).await.map(|_| ()),
        fence
            .append(&AppendRequest::new(
                domain.clone(),
                token,
                vec![Record::new("x")],
            ))
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(FenceError::CorruptState { .. })),
            "{result:?}"
        );
    }
    assert!(
        fence.read_log(&domain).await.unwrap().is_empty(),
        "nothing was appended"
    );
}

#[tokio::test]
async fn a_record_posing_with_fence_headers_is_refused_before_any_io() {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", "127.0.0.1:1");
    let fence = KafkaFence::builder(config)
        .data_topic("events")
        .build()
        .unwrap();
    for name in [
        fence_kafka::DOMAIN_HEADER,
        fence_kafka::TOKEN_HEADER,
        fence_kafka::OP_HEADER,
    ] {
        let forged = Record::new("v").with_header(name, "18446744073709551615");
        let refused = fence
            .append(&AppendRequest::new(
                Domain::new("d").unwrap(),
                FencingToken::new(1).unwrap(),
                vec![Record::new("fine"), forged],
            ))
            .await;
        match refused {
            Err(FenceError::InvalidInput(InvalidInput::ReservedName { name: n, .. })) => {
                assert_eq!(n, name)
            }
            other => panic!("a forged {name} header must be refused, got {other:?}"),
        }
    }
}
