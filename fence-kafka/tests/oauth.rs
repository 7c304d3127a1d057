//! SASL/OAUTHBEARER: the token provider given to the fence is asked by each kind of client the
//! fence opens, and its token is exactly what the client presents. The far end is
//! `SaslRecorder`, which takes a client through the SASL handshake and records the token bytes,
//! which a real broker does not show; the end-to-end evidence on Apache Kafka (authentication,
//! ACLs, a fence without a provider refused) is `tests/oauth_acls.rs`. librdkafka has
//! OAUTHBEARER only when built with OpenSSL: the `ssl` feature.
#![cfg(feature = "ssl")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fence_conformance::wait::until;
use fence_core::{Domain, Fence};
use fence_kafka::rdkafka::client::OAuthToken;
use fence_kafka::rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use fence_kafka::rdkafka::producer::ThreadedProducer;
use fence_kafka::{FencedConsumer, KafkaContext, KafkaFence};
use fence_testkit::kafka_sasl::SaslRecorder;

/// How long the clients get to authenticate.
const WITHIN: Duration = Duration::from_secs(20);

fn oauth_config(recorder: &SaslRecorder) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", recorder.address())
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER")
        .set("reconnect.backoff.ms", "50");
    config
}

/// A provider that hands out `token-<n>` and counts its calls.
fn provider(calls: Arc<AtomicUsize>) -> KafkaContext {
    KafkaContext::with_oauth(move |_config: Option<&str>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let expires = SystemTime::now().duration_since(UNIX_EPOCH)? + Duration::from_secs(600);
        Ok(OAuthToken {
            token: format!("token-{n}"),
            principal_name: "fence-test".into(),
            lifetime_ms: i64::try_from(expires.as_millis())?,
        })
    })
}

/// Every token a client presented is one the provider handed out.
fn presented_tokens_came_from_the_provider(recorder: &SaslRecorder, calls: &AtomicUsize) {
    let handed_out: Vec<String> = (0..calls.load(Ordering::SeqCst))
        .map(|n| format!("token-{n}"))
        .collect();
    let presented = recorder.bearer_tokens();
    assert!(!presented.is_empty());
    assert!(
        presented.iter().all(|t| handed_out.contains(t)),
        "presented {presented:?}, handed out {handed_out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fences_own_consumer_authenticates_with_the_providers_token() {
    let refused = KafkaFence::builder(ClientConfig::new().set("bootstrap.servers", "h:1").clone())
        .data_topic("payments")
        .context(provider(Arc::new(AtomicUsize::new(0))))
        .build();
    assert!(
        matches!(refused, Err(fence_core::FenceError::InvalidInput(_))),
        "a provider without sasl.mechanism=OAUTHBEARER is never asked: {refused:?}"
    );
    let recorder = SaslRecorder::start().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let fence = KafkaFence::builder(oauth_config(&recorder))
        .data_topic("payments")
        .context(provider(calls.clone()))
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    // The recorder is no broker: the read fails, after the client authenticated.
    let read = fence
        .high_water_mark(&Domain::new("order-7").unwrap())
        .await;
    assert!(read.is_err(), "{read:?}");
    assert!(
        calls.load(Ordering::SeqCst) >= 1,
        "the provider was never asked"
    );
    assert!(recorder.mechanisms().iter().all(|m| m == "OAUTHBEARER"));
    presented_tokens_came_from_the_provider(&recorder, &calls);
    println!(
        "provider asked {} times; tokens presented: {:?}",
        calls.load(Ordering::SeqCst),
        recorder.bearer_tokens()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_and_fenced_consumers_on_the_context_authenticate_too() {
    let recorder = SaslRecorder::start().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let context = provider(calls.clone());
    // The producer kind the fence opens per domain (its polling thread serves the request).
    let producer: ThreadedProducer<KafkaContext> =
        ThreadedProducer::from_config_and_context(&oauth_config(&recorder), context.clone())
            .unwrap();
    until("the producer authenticates", WITHIN, || {
        !recorder.bearer_tokens().is_empty()
    })
    .await;
    drop(producer);
    let after_producer = recorder.bearer_tokens().len();

    let mut config = oauth_config(&recorder);
    config.set("group.id", "fence-oauth-test");
    let mut consumer = FencedConsumer::with_context(&config, context, &["payments"]).unwrap();
    let recv = tokio::time::timeout(Duration::from_secs(2), consumer.recv()).await;
    assert!(!matches!(recv, Ok(Ok(_))), "the recorder has no records");
    until("the fenced consumer authenticates", WITHIN, || {
        recorder.bearer_tokens().len() > after_producer
    })
    .await;
    presented_tokens_came_from_the_provider(&recorder, &calls);
}
