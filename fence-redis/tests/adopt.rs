//! Adopting keys another tool wrote, on real Redis, standalone and Cluster: a plain string
//! becomes a domain's value, a hash becomes a fenced user key, and every refusal changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{assert_fenced, domain as d, put, token as t, unavailable};
use fence_core::{Domain, Fence, FenceError, FencedStore, InvalidInput, Observed};
use fence_redis::redis::{self, Value};
use fence_redis::{FencedScript, RedisFence, RedisFenceError, ScriptCall, ScriptValue};
use fence_testkit::redis::{shared_cluster, shared_url, unique_prefix, RawRedis};

async fn fences(test: &str) -> Vec<(Observed<RedisFence>, RawRedis)> {
    let (Some(url), Some(nodes)) = (shared_url(), shared_cluster()) else {
        unavailable("Redis (standalone and Cluster)");
        return Vec::new();
    };
    let mut fences = Vec::new();
    for (builder, cluster) in [
        (RedisFence::builder().url(url), false),
        (RedisFence::builder().cluster(nodes), true),
    ] {
        let fence = builder
            .prefix(unique_prefix(test))
            .max_value_bytes(64)
            .connect()
            .await
            .expect("connect to the shared Redis");
        fences.push((fence, RawRedis::shared(cluster).await));
    }
    fences
}

/// A key another tool would write, in the domain's hash slot (Cluster needs it).
fn foreign_key(fence: &Observed<RedisFence>, domain: &Domain, what: &str) -> String {
    format!("legacy-{}:{what}:{{{}}}", fence.prefix(), domain.escaped())
}

async fn exists(raw: &mut RawRedis, key: &str) -> bool {
    raw.query(redis::cmd("EXISTS").arg(key)).await == Value::Int(1)
}

fn assert_refused(result: Result<impl std::fmt::Debug, FenceError>, expected: &str) {
    match result {
        Err(error @ FenceError::Backend { .. }) => {
            let source =
                std::error::Error::source(&error).and_then(|s| s.downcast_ref::<RedisFenceError>());
            assert!(
                matches!(source, Some(RedisFenceError::AdoptRefused { .. })),
                "{error:?}"
            );
            assert!(!error.is_retryable());
            assert!(error.to_string().contains(expected), "{error}");
        }
        other => panic!("expected a refused adoption ({expected}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_plain_string_becomes_the_domains_value() {
    for (fence, mut raw) in fences("adopt-value").await {
        let domain = d("cart 42");
        let key = foreign_key(&fence, &domain, "cart");
        raw.query(redis::cmd("SET").arg(&key).arg("3 apples")).await;
        let accepted = fence.adopt_value(&domain, t(5), &key).await.unwrap();
        assert_eq!((accepted.token, accepted.revision.get()), (t(5), 1));
        let snapshot = fence.read(&domain).await.unwrap();
        assert_eq!(snapshot.value().map(|v| &v[..]), Some(&b"3 apples"[..]));
        assert_eq!(snapshot.high_water_mark, Some(t(5)));
        assert!(
            !exists(&mut raw, &key).await,
            "the adopted key is moved, not copied"
        );
        assert_fenced(put(&fence, &domain, 4, "stale").await, 4, 5);
        put(&fence, &domain, 5, "4 apples").await.unwrap();

        // The domain holds a value now: a second adoption into it changes nothing.
        raw.query(redis::cmd("SET").arg(&key).arg("other")).await;
        assert_refused(
            fence.adopt_value(&domain, t(6), &key).await,
            "already holds",
        );
        assert!(exists(&mut raw, &key).await);
        assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(5)));
    }
}

#[tokio::test]
async fn refused_adoptions_change_nothing() {
    for (fence, mut raw) in fences("adopt-refused").await {
        let domain = d("profile");
        let missing = foreign_key(&fence, &domain, "missing");
        match fence.adopt_value(&domain, t(1), &missing).await {
            Err(error @ FenceError::Backend { .. }) => {
                assert_eq!(
                    error.backend_kind(),
                    Some(fence_core::BackendErrorKind::NotFound)
                );
                assert!(!error.is_retryable());
                assert!(error.to_string().contains("does not exist"), "{error}");
            }
            other => panic!("expected a missing key, got {other:?}"),
        }
        let hash = foreign_key(&fence, &domain, "hash");
        raw.query(redis::cmd("HSET").arg(&hash).arg("name").arg("ada"))
            .await;
        assert_refused(fence.adopt_value(&domain, t(1), &hash).await, "adopt_key");
        let big = foreign_key(&fence, &domain, "big");
        raw.query(redis::cmd("SET").arg(&big).arg("x".repeat(65)))
            .await;
        assert_refused(fence.adopt_value(&domain, t(1), &big).await, "65 bytes");
        // A stale token is refused like a stale write.
        fence.claim(&domain, t(9)).await.unwrap();
        let string = foreign_key(&fence, &domain, "string");
        raw.query(redis::cmd("SET").arg(&string).arg("v")).await;
        assert_fenced(fence.adopt_value(&domain, t(8), &string).await, 8, 9);
        for key in [&hash, &big, &string] {
            assert!(exists(&mut raw, key).await, "{key} was touched");
        }
        assert_eq!(fence.read(&domain).await.unwrap().value(), None);
        // Fence's own keys are never "foreign".
        let own = format!("{}:{{profile}}:state", fence.prefix());
        assert!(matches!(
            fence.adopt_value(&domain, t(9), &own).await,
            Err(FenceError::InvalidInput(InvalidInput::InvalidKey { .. }))
        ));
    }
}

#[tokio::test]
async fn a_hash_becomes_a_fenced_user_key() {
    for (fence, mut raw) in fences("adopt-key").await {
        let domain = d("user-7");
        let key = foreign_key(&fence, &domain, "user");
        raw.query(
            redis::cmd("HSET")
                .arg(&key)
                .arg("name")
                .arg("ada")
                .arg("plan")
                .arg("free"),
        )
        .await;
        let claimed = fence
            .adopt_key(&domain, t(3), &key, "profile")
            .await
            .unwrap();
        assert_eq!(claimed.token, t(3));
        assert!(!exists(&mut raw, &key).await);
        let target = fence.user_key(&domain, "profile").unwrap();
        let name = raw.query(redis::cmd("HGET").arg(&target).arg("name")).await;
        assert_eq!(name, Value::BulkString(b"ada".to_vec()));

        let upgrade = FencedScript::new("return redis.call('HSET', KEYS[1], 'plan', ARGV[1])");
        let call = |token| {
            ScriptCall::new(domain.clone(), t(token))
                .key("profile")
                .arg("pro")
        };
        assert_fenced(fence.run_script(&upgrade, &call(2)).await, 2, 3);
        let outcome = fence.run_script(&upgrade, &call(3)).await.unwrap();
        assert_eq!(outcome.result, ScriptValue::Integer(0));
        let plan = raw.query(redis::cmd("HGET").arg(&target).arg("plan")).await;
        assert_eq!(plan, Value::BulkString(b"pro".to_vec()));

        // The user key exists now: adopting another key under the same name changes nothing.
        let other = foreign_key(&fence, &domain, "other");
        raw.query(redis::cmd("SET").arg(&other).arg("x")).await;
        assert_refused(
            fence.adopt_key(&domain, t(4), &other, "profile").await,
            "already has",
        );
        assert!(exists(&mut raw, &other).await);
        assert_eq!(fence.high_water_mark(&domain).await.unwrap(), Some(t(3)));
    }
}

#[tokio::test]
async fn on_cluster_a_key_outside_the_domains_slot_is_refused_with_advice() {
    for (fence, mut raw) in fences("adopt-slot").await {
        let domain = d("orders");
        let key = format!("legacy-{}:orders", fence.prefix());
        raw.query(redis::cmd("SET").arg(&key).arg("v")).await;
        let cluster = matches!(raw, RawRedis::Cluster(_));
        if cluster {
            let state = format!("{}:{{orders}}:state", fence.prefix());
            let ours = raw
                .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key))
                .await;
            let domains = raw
                .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(&state))
                .await;
            assert_ne!(ours, domains, "the key must lie in another slot");
        }
        let result = fence.adopt_value(&domain, t(1), &key).await;
        if cluster {
            assert_refused(result, "hash slot");
            assert!(exists(&mut raw, &key).await);
            assert_eq!(fence.high_water_mark(&domain).await.unwrap(), None);
        } else {
            // Standalone Redis has one keyspace: any key can be adopted.
            assert_eq!(result.unwrap().revision.get(), 1);
        }
    }
}
