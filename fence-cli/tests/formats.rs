//! Every example of FORMATS.md tagged `example=<name>` is decoded here by the project's own
//! decoders: the shared line formats by fence-core's parsers, the S3, manifest and Kafka ledger
//! records by `fence decode`, and the Redis, outbox, PostgreSQL and etcd examples are loaded into
//! the real servers and read back with `fence inspect` / `fence outbox list`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::collections::BTreeMap;

use fence_conformance::services::unavailable;
use fence_core::raw::{percent_encode, EntryHead, OpRecord};
use fence_core::{Domain, OpKind, OpOutcome, OperationId, RebaseRecord};
use fence_etcd::etcd_client::{Txn, TxnOp};
use fence_redis::redis::AsyncCommands;
use serde_json::Value;
use support::fence;

/// The tagged examples of FORMATS.md, by name: each block's text, its final LF included.
fn examples() -> BTreeMap<String, String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../FORMATS.md");
    let text = std::fs::read_to_string(path).expect("FORMATS.md");
    let mut examples = BTreeMap::new();
    let mut lines = text.split_inclusive('\n');
    while let Some(line) = lines.next() {
        let Some(name) = line.trim_end().strip_prefix("```text example=") else {
            continue;
        };
        let mut body = String::new();
        for line in lines.by_ref() {
            if line.trim_end() == "```" {
                break;
            }
            body.push_str(line);
        }
        assert!(
            examples.insert(name.to_owned(), body).is_none(),
            "example `{name}` twice"
        );
    }
    examples
}

fn example(name: &str) -> String {
    examples()
        .remove(name)
        .unwrap_or_else(|| panic!("FORMATS.md has no example `{name}`"))
}

#[test]
fn formats_md_has_every_example_this_test_decodes() {
    let names: Vec<String> = examples().into_keys().collect();
    assert_eq!(
        names,
        [
            "entry-head",
            "escaping",
            "etcd-store",
            "kafka-headers",
            "kafka-ledger",
            "kafka-outbox-progress",
            "manifest",
            "op-line",
            "postgres",
            "rebase-line",
            "redis-op",
            "redis-outbox-entry",
            "redis-state",
            "s3-envelope",
        ]
    );
}

#[test]
fn shared_line_formats_decode_and_encode_back() {
    for line in example("escaping").lines() {
        let (raw, escaped) = line.split_once(" -> ").unwrap();
        assert_eq!(percent_encode(raw), escaped, "{raw}");
        assert_eq!(
            OperationId::from_escaped(escaped).map(|o| o.as_str().to_owned()),
            Some(raw.to_owned())
        );
    }
    let line = example("op-line");
    let record = OpRecord::parse_line(line.trim_end(), OpKind::Write).unwrap();
    assert_eq!(record.token, fence_core::FencingToken::MAX);
    assert_eq!(record.op_id.as_str(), "order-7/pay é");
    assert_eq!(record.previous.map(|t| t.get()), Some(1));
    assert_eq!(
        record.outcome,
        OpOutcome::Write {
            revision: fence_core::Revision::new(7)
        }
    );
    assert_eq!(record.to_line(), line.trim_end());
    for line in example("entry-head").lines() {
        let head = EntryHead::parse(line).unwrap();
        assert_eq!(head.to_string(), line);
    }
    let line = example("rebase-line");
    let record = RebaseRecord::parse_line(line.trim_end()).unwrap();
    assert_eq!(record.to_line(), line.trim_end());
    assert_eq!(record.from.get(), u64::MAX);
    assert_eq!(record.to.get(), 1042);
}

#[test]
fn s3_manifest_and_kafka_records_decode_with_the_command() {
    let envelope = fence(
        &[],
        &["--json", "decode", "s3-envelope"],
        example("s3-envelope").as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(envelope["mark"], "42");
    assert_eq!(envelope["entry"]["state"], "value");
    assert_eq!(envelope["entry"]["token"], "41");
    assert_eq!(envelope["entry"]["revision"], 7);
    assert_eq!(envelope["nonce"], "9f2c4e1a0b3d5c7e");
    assert_eq!(envelope["ops"][0]["op_id"], "order-7/pay");
    assert_eq!(envelope["ops"][0]["previous"], "40");
    assert_eq!(envelope["payload"]["value"], "region,amount\nnorth,10\n");

    let manifest = fence(
        &[],
        &["--json", "decode", "manifest"],
        example("manifest").as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(
        manifest["keys"],
        serde_json::json!(["lake/sales/2026/part-0.csv", "lake/sales/2026/part-1.csv"])
    );

    let ledger = fence(
        &[],
        &["--json", "decode", "kafka-ledger"],
        example("kafka-ledger").as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(ledger["mark"], "42");
    assert_eq!(ledger["ops"][0]["outcome"]["records"], 100);
    assert_eq!(ledger["ops"][1]["op_id"], "batch 8/a");
    assert_eq!(ledger["ops"][1]["previous"], "42");

    let headers = fence(
        &[],
        &["--json", "decode", "kafka-headers"],
        example("kafka-headers").as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(
        headers,
        serde_json::json!({ "fenced": true, "domain": "orders", "token": "42", "op_id": "batch-7" })
    );
    let packed = example("redis-outbox-entry");
    let entry = fence(
        &[],
        &["--json", "decode", "redis-outbox-entry"],
        packed.strip_suffix('\n').unwrap().as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(entry["key"], "order%2F42:7:pay:0");
    assert_eq!(entry["payload"]["value"], "{\"amount\":90}");
}

#[test]
fn redis_state_and_outbox_progress_decode_with_the_command() {
    let state = fence(
        &[],
        &["--json", "decode", "redis-state"],
        example("redis-state").as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(state["key"], "fence:{orders%2F42}:state");
    assert_eq!(state["mark"], "7");
    assert_eq!(
        (
            &state["entry"]["state"],
            &state["entry"]["token"],
            &state["entry"]["revision"]
        ),
        (&Value::from("value"), &Value::from("7"), &Value::from(3))
    );
    assert_eq!(state["entry"]["value"], "paid");
    let progress = example("kafka-outbox-progress").replace("<HTAB>", "\t");
    let json = fence(
        &[],
        &["--json", "decode", "kafka-outbox-progress"],
        progress.trim_end_matches('\n').as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(
        json,
        serde_json::json!({
            "format": "FENCE-OUTBOX-PROGRESS/1", "kind": "settle", "domain": "order/42",
            "seq": 1841, "outcome": "delivered", "at_ms": 1_700_000_000_500u64, "error": ""
        })
    );
}

/// `key value` lines (the first space splits them).
fn pairs(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(|line| {
            let (key, value) = line.split_once(' ').unwrap();
            (key.to_owned(), value.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn redis_examples_load_into_redis_and_read_back() {
    let Some(url) = fence_testkit::redis::shared_url() else {
        unavailable("the shared Redis");
        return;
    };
    let prefix = fence_testkit::redis::unique_prefix("formats");
    let ours = |key: &str| format!("{prefix}{}", key.strip_prefix("fence").unwrap());
    let mut raw = fence_testkit::redis::raw(&url).await;

    let state = pairs(&example("redis-state"));
    let (_, state_key) = &state[0];
    assert_eq!(state[0].0, "key");
    for (field, value) in &state[1..] {
        let _: () = raw.hset(ours(state_key), field, value).await.unwrap();
    }
    let op = pairs(&example("redis-op"));
    let _: () = raw.set(ours(&op[0].1), &op[1].1).await.unwrap();
    let env = [
        ("FENCE_REDIS_URL", url.clone()),
        ("FENCE_REDIS_PREFIX", prefix.clone()),
    ];
    assert_value_read_back(&env, "redis", "7");
    let json = fence(&env, &["--json", "inspect", "redis", "orders/42"], b"")
        .expect(0)
        .json();
    let op = &json["ops"][0];
    assert_eq!(
        (&op["op_id"], &op["kind"], &op["previous"], &op["outcome"]),
        (
            &Value::from("pay 1"),
            &Value::from("write"),
            &Value::from("5"),
            &Value::from("3")
        )
    );

    // The packed outbox record, in an outbox of one pending entry.
    let packed = example("redis-outbox-entry");
    let packed = packed.strip_suffix('\n').unwrap();
    let domain = Domain::new("order/42").unwrap();
    let tag = format!("{prefix}:{{{}}}", domain.escaped());
    let meta = [
        ("outbox", "1"),
        ("domain", "order/42"),
        ("partition", "0"),
        ("last", "1"),
        ("done", "0"),
        ("purged", "0"),
    ];
    let _: () = raw
        .hset_multiple(format!("{tag}:u:ob:meta"), &meta)
        .await
        .unwrap();
    let _: () = raw
        .hset(format!("{tag}:u:ob:entries"), "1", packed)
        .await
        .unwrap();
    let json = fence(
        &env,
        &["--json", "outbox", "list", "redis", "order/42"],
        b"",
    )
    .expect(0)
    .json();
    let entry = &json["entries"][0];
    assert_eq!(entry["key"], "order%2F42:7:pay:0");
    assert_eq!(entry["kind"], "charge-card");
    assert_eq!(entry["destination"], "https://psp.example/charge");
    assert_eq!(entry["payload"]["value"], "{\"amount\":90}");
    assert_eq!(entry["token"], "7");
    assert_eq!(entry["recorded_at_ms"], 1_700_000_000_123u64);
    assert_eq!(entry["status"], "pending");
}

#[tokio::test]
async fn the_postgres_example_loads_and_reads_back() {
    let Some(url) = fence_testkit::postgres::shared_url() else {
        unavailable("the shared PostgreSQL");
        return;
    };
    let schema = fence_testkit::postgres::unique_schema("formats");
    let pool = fence_testkit::postgres::pool(&url).await;
    fence_postgres::migrate(&pool, &schema).await.unwrap();
    for line in example("postgres").lines() {
        let columns: Vec<&str> = line.split(" | ").collect();
        let sql = match columns[0] {
            "fence_marks" => format!(
                "INSERT INTO {schema}.fence_marks (domain, hwm, state, revision, writer, value) \
                 VALUES ($1, $2::numeric, $3::\"char\", $4::bigint, $5::numeric, convert_to($6, 'UTF8'))"
            ),
            "fence_ops" => format!(
                "INSERT INTO {schema}.fence_ops (domain, token, op_id, kind, revision, previous) \
                 VALUES ($1, $2::numeric, $3, $4, $5::bigint, $6::numeric)"
            ),
            other => panic!("unknown table {other}"),
        };
        let mut query = fence_postgres::sqlx::query(&sql);
        for value in &columns[1..] {
            query = query.bind(*value);
        }
        query.execute(&pool).await.unwrap();
    }
    let env = [
        ("FENCE_POSTGRES_URL", url),
        ("FENCE_POSTGRES_SCHEMA", schema),
    ];
    assert_value_read_back(&env, "postgres", "7");
    let json = fence(&env, &["--json", "inspect", "postgres", "orders/42"], b"")
        .expect(0)
        .json();
    let op = &json["ops"][0];
    assert_eq!(
        (
            &op["op_id"],
            &op["kind"],
            &op["token"],
            &op["previous"],
            &op["outcome"]
        ),
        (
            &Value::from("pay 1"),
            &Value::from("write"),
            &Value::from("7"),
            &Value::from("5"),
            &Value::from("3")
        )
    );
}

#[tokio::test]
async fn the_etcd_example_loads_and_reads_back() {
    let Some(endpoints) = fence_testkit::etcd::shared_endpoints() else {
        unavailable("the shared etcd");
        return;
    };
    let prefix = fence_testkit::etcd::unique_prefix("formats");
    let mut client = fence_etcd::etcd_client::Client::connect(&endpoints, None)
        .await
        .unwrap();
    // The keys of one change, in one txn (the `ops` key is never newer than the state's).
    let puts = pairs(&example("etcd-store"))
        .into_iter()
        .map(|(key, value)| {
            let key = format!("{prefix}{}", key.strip_prefix("/fence").unwrap());
            // `\n` stands for LF; the `ops` value is its lines, each ended by LF.
            let value = value.replace("\\n", "\n");
            let value = if key.ends_with("/ops") {
                format!("{value}\n")
            } else {
                value
            };
            TxnOp::put(key, value, None)
        });
    let loaded = client
        .txn(Txn::new().and_then(puts.collect::<Vec<_>>()))
        .await
        .unwrap();
    assert!(loaded.succeeded());
    let env = [
        ("FENCE_ETCD_ENDPOINTS", endpoints.join(",")),
        ("FENCE_ETCD_PREFIX", prefix),
    ];
    assert_value_read_back(&env, "etcd", "1042");
}

/// `fence inspect` of the examples' domain `orders/42`: mark `token`, the value `paid` written
/// by `token` at revision 3.
fn assert_value_read_back(env: &[(&str, String)], backend: &str, token: &str) {
    let json = fence(env, &["--json", "inspect", backend, "orders/42"], b"")
        .expect(0)
        .json();
    assert_eq!(json["mark"], token, "{backend}");
    assert_eq!(json["entry"]["value"], "paid", "{backend}");
    assert_eq!(json["entry"]["revision"], 3, "{backend}");
    assert_eq!(json["entry"]["token"], token, "{backend}");
}
