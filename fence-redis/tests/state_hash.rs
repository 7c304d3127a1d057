//! The Rust decoder of the state hash (`fence_redis::decode_state`, for tools) and the scripts'
//! `load_state` (what the fence decides with) accept and refuse the same hashes, on real Redis,
//! standalone and Cluster: each hash is written raw, read by the fence, and decoded from
//! `HGETALL`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_conformance::services::{domain as d, token as t};
use fence_core::{Fence, FenceError, FencedStore, WriteRequest};
use fence_redis::decode_state;
use fence_redis::redis;
use fence_testkit::redis::{shared_cluster_fence, shared_fence, RawRedis};

/// Hashes the fence writes, and hashes no fence writes (foreign, damaged), by name.
const CASES: &[(&str, &[(&str, &str)])] = &[
    ("claimed", &[("fence", "1"), ("hwm", "7")]),
    (
        "value",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "3"),
            ("tok", "7"),
            ("state", "v"),
            ("val", "paid"),
        ],
    ),
    (
        "empty-value",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "1"),
            ("tok", "5"),
            ("state", "v"),
            ("val", ""),
        ],
    ),
    (
        "tombstone",
        &[
            ("fence", "1"),
            ("hwm", "9"),
            ("rev", "4"),
            ("tok", "9"),
            ("state", "t"),
        ],
    ),
    (
        "tombstone-with-stray-val",
        &[
            ("fence", "1"),
            ("hwm", "9"),
            ("rev", "4"),
            ("tok", "9"),
            ("state", "t"),
            ("val", "x"),
        ],
    ),
    (
        "u64-max",
        &[
            ("fence", "1"),
            ("hwm", "18446744073709551615"),
            ("rev", "999999999999999"),
            ("tok", "18446744073709551614"),
            ("state", "v"),
            ("val", "edge"),
        ],
    ),
    (
        "unknown-fields-ignored",
        &[("fence", "1"), ("hwm", "2"), ("later", "x")],
    ),
    ("foreign", &[("name", "someone else's hash")]),
    ("only-val", &[("val", "orphan")]),
    ("marker-2", &[("fence", "2"), ("hwm", "7")]),
    ("no-marker", &[("hwm", "7")]),
    ("hwm-zero", &[("fence", "1"), ("hwm", "0")]),
    ("hwm-leading-zero", &[("fence", "1"), ("hwm", "07")]),
    (
        "hwm-above-u64",
        &[("fence", "1"), ("hwm", "18446744073709551616")],
    ),
    (
        "hwm-missing",
        &[
            ("fence", "1"),
            ("rev", "1"),
            ("tok", "1"),
            ("state", "v"),
            ("val", "x"),
        ],
    ),
    (
        "state-unknown",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "1"),
            ("tok", "7"),
            ("state", "x"),
            ("val", "x"),
        ],
    ),
    (
        "rev-zero",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "0"),
            ("tok", "7"),
            ("state", "v"),
            ("val", "x"),
        ],
    ),
    (
        "rev-sixteen-digits",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "1000000000000000"),
            ("tok", "7"),
            ("state", "v"),
            ("val", "x"),
        ],
    ),
    (
        "rev-missing",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("tok", "7"),
            ("state", "v"),
            ("val", "x"),
        ],
    ),
    (
        "writer-above-mark",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "1"),
            ("tok", "8"),
            ("state", "v"),
            ("val", "x"),
        ],
    ),
    (
        "writer-not-a-token",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "1"),
            ("tok", "-1"),
            ("state", "v"),
            ("val", "x"),
        ],
    ),
    (
        "rev-without-entry",
        &[("fence", "1"), ("hwm", "7"), ("rev", "1")],
    ),
    (
        "tok-without-entry",
        &[("fence", "1"), ("hwm", "7"), ("tok", "7")],
    ),
    (
        "value-missing",
        &[
            ("fence", "1"),
            ("hwm", "7"),
            ("rev", "1"),
            ("tok", "7"),
            ("state", "v"),
        ],
    ),
];

#[tokio::test]
async fn the_rust_decoder_and_the_scripts_agree_on_every_hash() {
    let (Some(standalone), Some(cluster)) = (
        shared_fence("state-hash").await,
        shared_cluster_fence("state-hash").await,
    ) else {
        return;
    };
    for (fence, is_cluster) in [(standalone, false), (cluster, true)] {
        let mut raw = RawRedis::shared(is_cluster).await;
        let (mut accepted, mut refused) = (0, 0);
        for (name, fields) in CASES {
            let domain = d(name);
            let key = format!("{}:{{{}}}:state", fence.prefix(), domain.escaped());
            let mut hset = redis::cmd("HSET");
            hset.arg(&key);
            for (field, value) in *fields {
                hset.arg(field).arg(value);
            }
            raw.query(&hset).await;

            let by_script = match fence.read(&domain).await {
                Ok(snapshot) => Ok(snapshot),
                Err(error @ FenceError::CorruptState { .. }) => Err(error.to_string()),
                Err(other) => panic!("{name}: the fence's read failed otherwise: {other:?}"),
            };
            let stored = fence.state_fields(&domain).await.unwrap();
            assert_eq!(
                stored.len(),
                fields.len(),
                "{name}: HGETALL answered every field"
            );
            let by_decoder = decode_state(&stored).map_err(|e| e.to_string());
            match (&by_script, &by_decoder) {
                (Ok(_), Ok(_)) => accepted += 1,
                (Err(_), Err(_)) => refused += 1,
                _ => panic!("{name}: the script said {by_script:?}, the decoder {by_decoder:?}"),
            }
            assert_eq!(by_script.ok(), by_decoder.ok(), "{name}");
        }
        // Both halves of the corpus were exercised, so agreement is not vacuous.
        assert_eq!((accepted, refused), (7, 17), "cluster: {is_cluster}");
    }
}

#[tokio::test]
async fn what_the_fence_writes_decodes_and_keys_name_their_domain() {
    let (Some(standalone), Some(cluster)) = (
        shared_fence("state-hash-live").await,
        shared_cluster_fence("state-hash-live").await,
    ) else {
        return;
    };
    for fence in [standalone, cluster] {
        let domain = d("orders/42 {x}");
        assert!(fence.state_fields(&domain).await.unwrap().is_empty());
        assert_eq!(
            decode_state(&[]).unwrap(),
            fence.read(&domain).await.unwrap(),
            "no state on both sides"
        );
        fence
            .write(&WriteRequest::put(domain.clone(), t(5), "paid"))
            .await
            .unwrap();
        fence.claim(&domain, t(8)).await.unwrap();
        let decoded = decode_state(&fence.state_fields(&domain).await.unwrap()).unwrap();
        assert_eq!(decoded, fence.read(&domain).await.unwrap());
        assert_eq!(decoded.high_water_mark, Some(t(8)));
        assert_eq!(decoded.value().map(|v| &v[..]), Some(&b"paid"[..]));

        let key = format!("{}:{{{}}}:state", fence.prefix(), domain.escaped());
        assert_eq!(fence.domain_of_key(&key), Some(domain.clone()));
        for foreign in [
            "other:{orders%2F42%20%7Bx%7D}:state".to_owned(),
            format!("{}:{{orders/42}}:state", fence.prefix()),
            format!("{}:orders:state", fence.prefix()),
        ] {
            assert_eq!(fence.domain_of_key(&foreign), None, "{foreign}");
        }
    }
}

#[tokio::test]
async fn a_key_of_another_type_is_corrupt_state() {
    let Some(fence) = shared_fence("state-hash-type").await else {
        return;
    };
    let domain = d("a-string");
    let key = format!("{}:{{{}}}:state", fence.prefix(), domain.escaped());
    RawRedis::shared(false)
        .await
        .query(redis::cmd("SET").arg(&key).arg("plain"))
        .await;
    match fence.state_fields(&domain).await {
        Err(error @ FenceError::CorruptState { .. }) => {
            assert!(error.to_string().contains("not a hash"), "{error}");
        }
        other => panic!("expected corrupt state, got {other:?}"),
    }
}
