//! SASL/OAUTHBEARER and ACLs on Apache Kafka itself: a broker of the test's own whose client
//! port takes only OAUTHBEARER (Kafka's unsecured JWS validator, meant for tests) and whose
//! StandardAuthorizer decides every request. The fence's `OAuthTokenProvider` authenticates
//! each client kind it opens under a provider (its transactional producers, its ledger and log
//! readers, its watermark clients, and a `FencedConsumer`; it opens no admin client under a
//! provider), and `check_permissions()` names exactly the ACLs a limited principal lacks.
#![cfg(feature = "ssl")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fence_conformance::services::token as t;
use fence_core::{
    AppendRequest, BackendErrorKind, Domain, Fence, FenceError, FencedLog, Observed, Record,
};
use fence_kafka::rdkafka::client::OAuthToken;
use fence_kafka::rdkafka::config::ClientConfig;
use fence_kafka::{FencedConsumer, KafkaContext, KafkaFence};
use fence_testkit::kafka as support;
use fence_testkit::kafka_broker::{unsecured_token, BrokerOptions, KafkaServer};

/// A context whose provider hands out unsecured tokens for `principal`, counting its calls.
fn provider(principal: &'static str, calls: Arc<AtomicUsize>) -> KafkaContext {
    KafkaContext::with_oauth(move |_config: Option<&str>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let (token, lifetime_ms) = unsecured_token(principal);
        Ok(OAuthToken {
            token,
            principal_name: principal.into(),
            lifetime_ms,
        })
    })
}

fn oauth_config(server: &KafkaServer) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", server.bootstrap())
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER");
    config
}

/// A fence of `principal` on `topic` (and its ledger) through the SASL port.
fn fence_as(
    server: &KafkaServer,
    topic: &str,
    principal: &'static str,
) -> (Observed<KafkaFence>, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let fence = KafkaFence::builder(oauth_config(server))
        .data_topic(topic)
        .ledger_topic(format!("{topic}-ledger"))
        .transactional_id_prefix(format!("{topic}-"))
        .context(provider(principal, calls.clone()))
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    (fence, calls)
}

/// A broker with OAUTHBEARER and ACLs, and topics made on its internal (super user) port.
async fn secured(name: &str) -> Option<(KafkaServer, String)> {
    let server = KafkaServer::start_with(name, BrokerOptions::new().sasl_oauthbearer())?;
    let internal = support::client_config(&server.internal_bootstrap());
    let topic = support::unique(name);
    support::create_topic(&internal, &topic).await;
    // A plaintext fence creates the compacted ledger (a provider's fence cannot).
    let setup = support::fence_on_topic(&internal, &topic).await;
    setup
        .claim(&Domain::new("setup").unwrap(), t(1))
        .await
        .unwrap();
    Some((server, topic))
}

/// What a lease-holding worker needs (fence-kafka's README, "Forged tokens"), less `skip`.
fn grant_worker(server: &KafkaServer, principal: &str, topic: &str, skip: &str) {
    let user = format!("User:{principal}");
    let ledger = format!("{topic}-ledger");
    let prefix = format!("{topic}-:");
    let grants: [(&str, Vec<&str>); 5] = [
        (
            "describe-topics",
            vec![
                "--operation",
                "Describe",
                "--topic",
                topic,
                "--topic",
                &ledger,
            ],
        ),
        (
            "read-topics",
            vec!["--operation", "Read", "--topic", topic, "--topic", &ledger],
        ),
        ("write-data", vec!["--operation", "Write", "--topic", topic]),
        (
            "write-ledger",
            vec!["--operation", "Write", "--topic", &ledger],
        ),
        (
            "transactional-ids",
            vec![
                "--operation",
                "Write",
                "--operation",
                "Describe",
                "--transactional-id",
                &prefix,
                "--resource-pattern-type",
                "prefixed",
            ],
        ),
    ];
    for (name, args) in grants {
        if name == skip {
            continue;
        }
        let mut all = vec!["--allow-principal", user.as_str()];
        all.extend(args);
        server.add_acls(&all);
    }
    server.add_acls(&[
        "--allow-principal",
        &user,
        "--operation",
        "Read",
        "--group",
        "fence-",
        "--resource-pattern-type",
        "prefixed",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_client_the_fence_opens_authenticates_with_the_providers_token() {
    let Some((server, topic)) = secured("oauth-clients").await else {
        return;
    };
    grant_worker(&server, "worker", &topic, "");
    let (fence, calls) = fence_as(&server, &topic, "worker");
    let domain = Domain::new("orders").unwrap();
    fence.claim(&domain, t(2)).await.unwrap();
    fence
        .append(&AppendRequest::new(
            domain.clone(),
            t(2),
            vec![Record::new("paid")],
        ))
        .await
        .unwrap();
    let log = fence.read_log(&domain).await.unwrap();
    assert_eq!(log.len(), 1);
    assert!(
        calls.load(Ordering::SeqCst) >= 2,
        "each client asks the provider"
    );

    let consumer_calls = Arc::new(AtomicUsize::new(0));
    let mut config = oauth_config(&server);
    config
        .set("group.id", "fence-oauth-consumer")
        .set("auto.offset.reset", "earliest");
    let mut consumer = FencedConsumer::with_context(
        &config,
        provider("worker", consumer_calls.clone()),
        &[topic.as_str()],
    )
    .unwrap();
    let record = tokio::time::timeout(Duration::from_secs(60), consumer.recv())
        .await
        .expect("the fenced consumer reads through the SASL port")
        .unwrap();
    assert_eq!(&record.value[..], b"paid");
    assert!(consumer_calls.load(Ordering::SeqCst) >= 1);

    // A principal the authorizer knows nothing of authenticates, and is refused.
    let (stranger, stranger_calls) = fence_as(&server, &topic, "stranger");
    let refused = stranger.claim(&domain, t(3)).await;
    match refused {
        Err(FenceError::Backend { kind, .. }) => {
            assert_eq!(kind, BackendErrorKind::PermissionDenied, "{refused:?}")
        }
        other => panic!("a principal without ACLs must be refused: {other:?}"),
    }
    assert!(stranger_calls.load(Ordering::SeqCst) >= 1);

    // Without a provider, the broker that just served the worker gets no token from this
    // fence: it fails closed, and the mark is the worker's.
    let bare = support::fence_builder(&oauth_config(&server), &topic)
        .timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    // librdkafka cannot finish the SASL handshake without a token and reports the broker as
    // unreachable (a transport failure): `Unavailable`, although the broker is up.
    let unauthenticated = bare.claim(&domain, t(4)).await;
    assert!(
        matches!(
            unauthenticated,
            Err(FenceError::Backend {
                kind: BackendErrorKind::Unavailable,
                ..
            })
        ),
        "{unauthenticated:?}"
    );
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_permissions_names_exactly_the_acls_a_principal_lacks() {
    let Some((server, topic)) = secured("oauth-acls").await else {
        return;
    };
    let ledger = format!("{topic}-ledger");
    let denied = |report: &fence_core::permissions::PermissionReport| -> BTreeSet<String> {
        report.denied().map(|p| p.name.clone()).collect()
    };

    grant_worker(&server, "complete", &topic, "");
    let (fence, _) = fence_as(&server, &topic, "complete");
    let report = fence.check_permissions().await.unwrap();
    assert!(report.all_granted(), "{report:?}");

    for (principal, skipped, missing) in [
        (
            "no-ledger-write",
            "write-ledger",
            format!("Write on Topic {ledger}"),
        ),
        (
            "no-data-write",
            "write-data",
            format!("Write on Topic {topic}"),
        ),
    ] {
        grant_worker(&server, principal, &topic, skipped);
        let (fence, _) = fence_as(&server, &topic, principal);
        let report = fence.check_permissions().await.unwrap();
        assert_eq!(denied(&report), BTreeSet::from([missing]), "{report:?}");
    }

    grant_worker(&server, "no-transactional-id", &topic, "transactional-ids");
    let (fence, _) = fence_as(&server, &topic, "no-transactional-id");
    let report = fence.check_permissions().await.unwrap();
    let missing = denied(&report);
    assert_eq!(missing.len(), 1, "{report:?}");
    assert!(
        missing
            .iter()
            .all(|name| name.starts_with(&format!("Write on TransactionalId {topic}-:"))),
        "{report:?}"
    );
}
