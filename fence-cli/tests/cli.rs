//! The `fence` command against the real servers: every subcommand, its JSON and text output
//! and its exit codes (0 done, 2 usage, 3 refused, 4 not found, 5 corrupt, 6 unavailable).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use fence_conformance::services::{domain as d, put, token as t, unavailable};
use fence_core::{Fence, FencedStore, LeaseManager, OperationId, OwnerId, WriteRequest};
use fence_redis::redis;
use fence_redis::RedisFence;
use fence_s3::{ObjectOptions, S3Fence};
use fence_testkit::redis::{shared_url, unique_prefix};
use fence_testkit::s3 as s3_support;
use serde_json::Value;
use support::fence;

fn s3_env(prefix: &str) -> Option<Vec<(&'static str, String)>> {
    let endpoint = s3_support::shared_endpoint()?;
    Some(vec![
        ("FENCE_S3_ENDPOINT", endpoint),
        ("FENCE_S3_BUCKET", s3_support::BUCKET.into()),
        ("FENCE_S3_ACCESS_KEY", s3_support::ACCESS_KEY.into()),
        ("FENCE_S3_SECRET_KEY", s3_support::SECRET_KEY.into()),
        ("FENCE_S3_PREFIX", prefix.into()),
    ])
}

#[test]
fn help_and_usage_errors() {
    let help = fence(&[], &["--help"], b"");
    let help = help.expect(0);
    assert!(help.stdout.contains("inspect") && help.stdout.contains("FENCE_REDIS_URL"));
    let bad = fence(&[], &["inspect", "nosuch", "d"], b"").expect(2);
    assert!(bad.stderr.contains("nosuch"), "{}", bad.stderr);
    // A setting that is missing names the variable to set.
    let missing = fence(&[], &["--json", "inspect", "redis", "d"], b"").expect(2);
    let message = missing.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("FENCE_REDIS_URL"), "{message}");
    let both = [
        ("FENCE_REDIS_URL", "redis://127.0.0.1:1".to_owned()),
        ("FENCE_REDIS_CLUSTER", "redis://127.0.0.1:2".to_owned()),
    ];
    let conflict = fence(&both, &["inspect", "redis", "d"], b"").expect(2);
    assert!(conflict.stderr.contains("both"), "{}", conflict.stderr);
    let token = fence(&[], &["claim", "redis", "d", "007"], b"").expect(2);
    assert!(token.stderr.contains("007"), "{}", token.stderr);
    // A mistyped command is met with the one meant.
    let typo = fence(&[], &["inspcet", "redis", "d"], b"").expect(2);
    assert!(typo.stderr.contains("'inspect'"), "{}", typo.stderr);
    // Completions and the manual page, generated from the same definitions.
    let bash = fence(&[], &["completions", "bash"], b"").expect(0);
    assert!(bash.stdout.contains("_fence()") && bash.stdout.contains("inspect"));
    let man = fence(&[], &["manpage"], b"").expect(0);
    assert!(man.stdout.contains(".TH fence") && man.stdout.contains("qualify"));
}

#[tokio::test]
async fn redis_inspect_claim_and_adopt() {
    let Some(url) = shared_url() else {
        unavailable("the shared Redis");
        return;
    };
    let prefix = unique_prefix("cli");
    let env = vec![
        ("FENCE_REDIS_URL", url.clone()),
        ("FENCE_REDIS_PREFIX", prefix.clone()),
        // An empty variable counts as unset, so this is not a conflict.
        ("FENCE_REDIS_CLUSTER", String::new()),
    ];
    let library = RedisFence::builder()
        .url(&url)
        .prefix(&prefix)
        .connect()
        .await
        .unwrap();
    let domain = d("orders/7");
    let lease = library
        .leases()
        .acquire(
            &domain,
            &OwnerId::new("worker-a").unwrap(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let request = WriteRequest::put(domain.clone(), lease.token, "paid")
        .with_op_id(OperationId::new("pay-1").unwrap());
    library.write(&request).await.unwrap();

    let inspected = fence(&env, &["--json", "inspect", "redis", "orders/7"], b"").expect(0);
    let json = inspected.json();
    let token = lease.token.to_string();
    assert_eq!(json["mark"], token.as_str());
    assert_eq!(json["entry"]["state"], "value");
    assert_eq!(json["entry"]["value"], "paid");
    assert_eq!(json["entry"]["revision"], 1);
    assert_eq!(json["ops"][0]["op_id"], "pay-1");
    assert_eq!(json["ops"][0]["outcome"], "1");
    assert_eq!(json["lease"]["owner"], "worker-a");
    assert_eq!(json["lease"]["token"], token.as_str());
    let text = fence(&env, &["inspect", "redis", "orders/7"], b"").expect(0);
    println!("fence inspect redis orders/7\n{}", text.stdout);
    assert!(
        text.stdout.contains("held by \"worker-a\""),
        "{}",
        text.stdout
    );

    // Claims: a stale one is refused with exit 3, a newer one raises the mark.
    let stale = fence(&env, &["--json", "claim", "redis", "orders/7", "0"], b"").expect(2);
    assert_eq!(stale.json()["error"]["class"], "invalid_input");
    let next = (lease.token.get() + 5).to_string();
    fence(&env, &["claim", "redis", "orders/7", &next], b"").expect(0);
    let refused = fence(&env, &["--json", "claim", "redis", "orders/7", &token], b"").expect(3);
    assert_eq!(refused.json()["error"]["class"], "refused");
    assert_eq!(
        library
            .high_water_mark(&domain)
            .await
            .unwrap()
            .map(|t| t.get()),
        next.parse().ok()
    );

    // Never-seen domains are "not found"; corrupt state is exit 5.
    let unseen = fence(&env, &["--json", "inspect", "redis", "nobody"], b"").expect(4);
    assert_eq!(unseen.json()["mark"], Value::Null);
    let mut raw = fence_testkit::redis::raw(&url).await;
    let state = format!("{prefix}:{{broken}}:state");
    let _: () = redis::AsyncCommands::set(&mut raw, &state, "not a hash")
        .await
        .unwrap();
    let corrupt = fence(&env, &["--json", "inspect", "redis", "broken"], b"").expect(5);
    assert_eq!(corrupt.json()["error"]["class"], "corrupt");

    // decode redis-state: the live hash by its key (binary-safe), the same hash as text, and
    // keys that are no domain's state.
    let state_key = format!("{prefix}:{{orders%2F7}}:state");
    let decoded = fence(
        &env,
        &["--json", "decode", "redis-state", "--key", &state_key],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(decoded["key"], state_key.as_str());
    assert_eq!(decoded["mark"], next.as_str());
    assert_eq!(decoded["entry"]["state"], "value");
    assert_eq!(decoded["entry"]["token"], token.as_str());
    assert_eq!(decoded["entry"]["value"], "paid");
    let as_text =
        format!("key {state_key}\nfence 1\nhwm {next}\nrev 1\ntok {token}\nstate v\nval paid\n");
    let piped = fence(
        &[],
        &["--json", "decode", "redis-state"],
        as_text.as_bytes(),
    )
    .expect(0)
    .json();
    assert_eq!(piped, decoded);
    let broken = fence(
        &env,
        &["--json", "decode", "redis-state", "--key", &state],
        b"",
    )
    .expect(5);
    assert_eq!(broken.json()["error"]["class"], "corrupt");
    let absent = format!("{prefix}:{{nobody}}:state");
    fence(&env, &["decode", "redis-state", "--key", &absent], b"").expect(4);
    let foreign = fence(
        &env,
        &["decode", "redis-state", "--key", "other:{x}:state"],
        b"",
    )
    .expect(2);
    assert!(foreign.stderr.contains(&prefix), "{}", foreign.stderr);
    let lease_key = format!("{prefix}:{{orders%2F7}}:lease");
    fence(&env, &["decode", "redis-state", "--key", &lease_key], b"").expect(2);
    // A user key may hold `}:state` in its name: it is still no state key.
    let user_key = format!("{prefix}:{{orders%2F7}}:u:a}}:state");
    fence(&env, &["decode", "redis-state", "--key", &user_key], b"").expect(2);

    // Token bounds: a mistyped token is refused by the default step, and mark stays put;
    // the bound is what refused it (with no bound the claim goes through).
    let far = fence(
        &env,
        &["--json", "claim", "redis", "typo", "18446744073709551615"],
        b"",
    )
    .expect(3);
    assert_eq!(far.json()["error"]["class"], "refused", "{}", far.stdout);
    assert!(
        far.stdout.contains("more than 1000000 above the mark"),
        "{}",
        far.stdout
    );
    assert_eq!(library.high_water_mark(&d("typo")).await.unwrap(), None);
    fence(
        &env,
        &[
            "--max-token-step",
            "0",
            "claim",
            "redis",
            "typo",
            "18446744073709551615",
        ],
        b"",
    )
    .expect(0);
    // Issued-only: nothing was issued for this domain, so a claim is refused as unissued.
    let unissued = fence(
        &env,
        &[
            "--json",
            "--issued-only",
            "claim",
            "redis",
            "never-issued",
            "5",
        ],
        b"",
    )
    .expect(3);
    assert!(
        unissued.stdout.contains("not issued"),
        "{}",
        unissued.stdout
    );

    // Fencing everyone out before a retirement, through the command alone (LIFECYCLE.md): a
    // token from the resource's issuer, a claim with it, a fenced delete.
    library
        .write(&WriteRequest::put(d("closing"), t(4), "last"))
        .await
        .unwrap();
    let issued = fence(&env, &["--json", "issue", "redis", "closing"], b"")
        .expect(0)
        .json();
    let token: u64 = issued["token"].as_str().unwrap().parse().unwrap();
    fence(
        &env,
        &["claim", "redis", "closing", &token.to_string()],
        b"",
    )
    .expect(0);
    fence(&env, &["delete", "redis", "closing", "3"], b"").expect(3);
    let deleted = fence(
        &env,
        &["--json", "delete", "redis", "closing", &token.to_string()],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(deleted["previous_mark"], token.to_string(), "{deleted}");
    let closed = library.read(&d("closing")).await.unwrap();
    assert!(closed.value().is_none(), "{closed:?}");
    assert_eq!(closed.high_water_mark, Some(t(token)));
    // The old holder's token is refused from now on.
    assert!(library
        .write(&WriteRequest::put(d("closing"), t(4), "late"))
        .await
        .is_err_and(|e| e.is_fenced()));

    // Adopt: a plain string becomes a domain's value, through the command.
    let legacy = format!("legacy-{prefix}:{{cart}}");
    let _: () = redis::AsyncCommands::set(&mut raw, &legacy, "3 apples")
        .await
        .unwrap();
    let adopted = fence(
        &env,
        &["adopt", "redis", "cart", "9", "--key", &legacy],
        b"",
    )
    .expect(0);
    assert!(adopted.stdout.contains("adopted key"), "{}", adopted.stdout);
    assert_eq!(
        library
            .read(&d("cart"))
            .await
            .unwrap()
            .value()
            .map(|v| v.to_vec()),
        Some(b"3 apples".to_vec())
    );
    let again = fence(
        &env,
        &["adopt", "redis", "cart", "9", "--key", &legacy],
        b"",
    )
    .expect(4);
    assert!(again.stderr.contains("does not exist"), "{}", again.stderr);
    // Onto a domain that holds a fenced value: a stale token exits 3 (refused), a current one
    // 1 (already under fencing), as on S3.
    let _: () = redis::AsyncCommands::set(&mut raw, &legacy, "4 pears")
        .await
        .unwrap();
    fence(
        &env,
        &["adopt", "redis", "cart", "8", "--key", &legacy],
        b"",
    )
    .expect(3);
    let fenced = fence(
        &env,
        &["adopt", "redis", "cart", "10", "--key", &legacy],
        b"",
    )
    .expect(1);
    assert!(fenced.stderr.contains("already holds"), "{}", fenced.stderr);

    // Any key becomes a user key of a domain's fenced scripts with --user-key.
    let profile = format!("legacy-{prefix}:{{profile}}");
    redis::cmd("HSET")
        .arg(&profile)
        .arg("name")
        .arg("ada")
        .exec_async(&mut raw)
        .await
        .unwrap();
    let adopted = fence(
        &env,
        &[
            "adopt",
            "redis",
            "profile",
            "4",
            "--key",
            &profile,
            "--user-key",
            "card",
        ],
        b"",
    )
    .expect(0);
    assert!(
        adopted.stdout.contains("as its user key `card`"),
        "{}",
        adopted.stdout
    );
    let card = library.user_key(&d("profile"), "card").unwrap();
    let name: Option<String> = redis::AsyncCommands::hget(&mut raw, &card, "name")
        .await
        .unwrap();
    assert_eq!(name.as_deref(), Some("ada"));
    assert_eq!(
        library.high_water_mark(&d("profile")).await.unwrap(),
        Some(t(4))
    );

    // A deleted domain shows its tombstone (and keeps its mark).
    library
        .write(&WriteRequest::delete(d("cart"), t(10)))
        .await
        .unwrap();
    let gone = fence(&env, &["--json", "inspect", "redis", "cart"], b"")
        .expect(0)
        .json();
    assert_eq!(
        (
            &gone["mark"],
            &gone["entry"]["state"],
            &gone["entry"]["token"],
            &gone["entry"]["revision"]
        ),
        (
            &Value::from("10"),
            &Value::from("tombstone"),
            &Value::from("10"),
            &Value::from(2)
        )
    );

    // A server that is not there is "unavailable" (a retry may help).
    let gone = [(
        "FENCE_REDIS_URL",
        format!("redis://127.0.0.1:{}", fence_testkit::free_port()),
    )];
    let down = fence(&gone, &["--json", "inspect", "redis", "x"], b"").expect(6);
    assert_eq!(down.json()["error"]["retryable"], true);
}

#[tokio::test]
async fn s3_inspect_adopt_and_decode() {
    let prefix = s3_support::unique_prefix("cli");
    let Some(env) = s3_env(&prefix) else {
        return;
    };
    let endpoint = s3_support::shared_endpoint().unwrap();
    let library = S3Fence::builder()
        .client(s3_support::client(&endpoint))
        .bucket(s3_support::BUCKET)
        .prefix(&prefix)
        .object_options(ObjectOptions::new().content_type("text/csv"))
        .connect()
        .await
        .unwrap();
    let domain = d("q3 report");
    let request = WriteRequest::put(domain.clone(), t(4), "a,b\n1,2\n")
        .with_op_id(OperationId::new("run-17").unwrap());
    library.write(&request).await.unwrap();

    let json = fence(&env, &["--json", "inspect", "s3", "q3 report"], b"")
        .expect(0)
        .json();
    let key = library.object_key(&domain).unwrap();
    assert_eq!(json["location"], key.as_str());
    assert_eq!(json["mark"], "4");
    assert_eq!(json["entry"]["value"], "a,b\n1,2\n");
    assert_eq!(json["ops"][0]["op_id"], "run-17");
    assert_eq!(json["details"]["content_type"], "text/csv");
    assert_eq!(json["details"]["nonce"].as_str().map(str::len), Some(16));

    // decode: the raw object from the bucket, the same bytes from stdin, garbage refused.
    let decoded = fence(
        &env,
        &["--json", "decode", "s3-envelope", "--object", &key],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(decoded["mark"], "4");
    assert_eq!(decoded["entry"]["revision"], 1);
    assert_eq!(decoded["payload"]["value"], "a,b\n1,2\n");
    let raw = s3_support::raw_get(&s3_support::client(&endpoint), &key).await;
    let piped = fence(&[], &["--json", "decode", "s3-envelope"], &raw)
        .expect(0)
        .json();
    assert_eq!(piped, decoded);
    let garbage = fence(&[], &["--json", "decode", "s3-envelope"], b"id,name\n").expect(5);
    assert_eq!(garbage.json()["error"]["class"], "corrupt");

    // A foreign object is corrupt until adopted through the command.
    // The verbatim layout: a domain is its object's path under the prefix.
    let verbatim = S3Fence::builder()
        .client(s3_support::client(&endpoint))
        .bucket(s3_support::BUCKET)
        .prefix(&prefix)
        .key_layout(fence_s3::KeyLayout::Verbatim)
        .connect()
        .await
        .unwrap();
    put(
        &verbatim,
        &d("sales/2026/part-0.csv"),
        6,
        "r,a
",
    )
    .await
    .unwrap();
    let mut in_place = env.clone();
    in_place.push(("FENCE_S3_KEY_LAYOUT", "verbatim".into()));
    let json = fence(
        &in_place,
        &["--json", "inspect", "s3", "sales/2026/part-0.csv"],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(json["location"], format!("{prefix}sales/2026/part-0.csv"));
    assert_eq!(
        (&json["mark"], &json["entry"]["value"]),
        (
            &Value::from("6"),
            &Value::from(
                "r,a
"
            )
        )
    );
    // The same domain under the escaped layout is another object, never written.
    fence(&env, &["inspect", "s3", "sales/2026/part-0.csv"], b"").expect(4);

    let foreign = d("legacy.csv");
    let foreign_key = library.object_key(&foreign).unwrap();
    s3_support::client(&endpoint)
        .put_object()
        .bucket(s3_support::BUCKET)
        .key(&foreign_key)
        .body(b"id,name\n".to_vec().into())
        .send()
        .await
        .unwrap();
    fence(&env, &["inspect", "s3", "legacy.csv"], b"").expect(5);
    fence(&env, &["adopt", "s3", "legacy.csv", "2"], b"").expect(0);
    let adopted = fence(&env, &["--json", "inspect", "s3", "legacy.csv"], b"")
        .expect(0)
        .json();
    assert_eq!(adopted["entry"]["value"], "id,name\n");
    fence(&env, &["claim", "s3", "legacy.csv", "1"], b"").expect(3);
    // S3 issues no tokens: usage, not a failure at the resource.
    let no_issuer = fence(&env, &["issue", "s3", "legacy.csv"], b"").expect(2);
    assert!(
        no_issuer.stderr.contains("s3 issues no tokens"),
        "{}",
        no_issuer.stderr
    );
    // Adopting it again: a stale token exits 3 (refused), a current one 1 (already under
    // fencing), as on Redis.
    fence(&env, &["adopt", "s3", "legacy.csv", "1"], b"").expect(3);
    let fenced = fence(&env, &["adopt", "s3", "legacy.csv", "7"], b"").expect(1);
    assert!(
        fenced.stderr.contains("already under fencing"),
        "{}",
        fenced.stderr
    );
    // Nothing to adopt: not found.
    let nothing = fence(
        &env,
        &["--json", "adopt", "s3", "nothing-here.csv", "2"],
        b"",
    )
    .expect(4);
    assert_eq!(nothing.json()["error"]["class"], "not_found");
    // decode from a file, and a file that is not there.
    let saved = std::env::temp_dir().join(format!("{}.envelope", fence_testkit::unique_suffix()));
    std::fs::write(&saved, &raw).unwrap();
    let from_file = fence(
        &[],
        &[
            "--json",
            "decode",
            "s3-envelope",
            "--file",
            saved.to_str().unwrap(),
        ],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(from_file, decoded);
    std::fs::remove_file(&saved).unwrap();
    fence(
        &[],
        &["decode", "s3-envelope", "--file", saved.to_str().unwrap()],
        b"",
    )
    .expect(4);
    // Credentials the server refuses: a failure a retry cannot mend, not "unavailable".
    let mut refused = env.clone();
    refused.retain(|(k, _)| *k != "FENCE_S3_SECRET_KEY");
    refused.push(("FENCE_S3_SECRET_KEY", "not-the-secret".into()));
    let denied = fence(
        &refused,
        &["--json", "decode", "s3-envelope", "--object", &key],
        b"",
    )
    .expect(1);
    assert_eq!(
        denied.json()["error"]["class"],
        "failed",
        "{}",
        denied.stdout
    );
    let missing = fence(
        &env,
        &["decode", "s3-envelope", "--object", "no/such/key"],
        b"",
    );
    missing.expect(4);
}

#[tokio::test]
async fn sql_etcd_and_dynamodb_inspect_show_the_lease_and_retire() {
    let (Some(pg_url), Some(my_url), Some(endpoints), Some(dynamodb_endpoint)) = (
        fence_testkit::postgres::shared_url(),
        fence_testkit::mysql::shared_url(),
        fence_testkit::etcd::shared_endpoints(),
        fence_testkit::dynamodb::shared_endpoint(),
    ) else {
        unavailable("the shared PostgreSQL, MariaDB, etcd and DynamoDB (moto)");
        return;
    };
    let dynamodb = fence_testkit::dynamodb::shared("cli").await.unwrap();
    let schema = fence_testkit::postgres::unique_schema("cli");
    let pool = fence_testkit::postgres::pool(&pg_url).await;
    fence_postgres::migrate(&pool, &schema).await.unwrap();
    let postgres = fence_postgres::PostgresFence::builder(pool, &schema)
        .build()
        .unwrap();
    let database = fence_testkit::mysql::unique_database("cli");
    let my_pool = fence_testkit::mysql::pool(&my_url).await;
    fence_mysql::migrate(&my_pool, &database).await.unwrap();
    let mysql = fence_mysql::MySqlFence::builder(my_pool, &database)
        .build()
        .unwrap();
    let etcd_prefix = fence_testkit::etcd::unique_prefix("cli");
    let etcd = fence_etcd::Etcd::connect(&endpoints, None, &etcd_prefix)
        .await
        .unwrap();
    let domain = d("account-9");
    let owner = OwnerId::new("worker-b").unwrap();
    let ttl = Duration::from_secs(60);
    let pg_lease = postgres
        .leases()
        .acquire(&domain, &owner, ttl)
        .await
        .unwrap();
    postgres
        .write(
            &WriteRequest::put(domain.clone(), pg_lease.token, "100")
                .with_op_id(OperationId::new("deposit 1").unwrap()),
        )
        .await
        .unwrap();
    let my_lease = mysql.leases().acquire(&domain, &owner, ttl).await.unwrap();
    mysql
        .write(
            &WriteRequest::put(domain.clone(), my_lease.token, "100")
                .with_op_id(OperationId::new("deposit 1").unwrap()),
        )
        .await
        .unwrap();
    let etcd_lease = etcd.leases().acquire(&domain, &owner, ttl).await.unwrap();
    etcd.fence()
        .write(
            &WriteRequest::put(domain.clone(), etcd_lease.token, "100")
                .with_op_id(OperationId::new("deposit 1").unwrap()),
        )
        .await
        .unwrap();
    let dynamodb_lease = dynamodb
        .leases()
        .acquire(&domain, &owner, ttl)
        .await
        .unwrap();
    dynamodb
        .fence()
        .write(
            &WriteRequest::put(domain.clone(), dynamodb_lease.token, "100")
                .with_op_id(OperationId::new("deposit 1").unwrap()),
        )
        .await
        .unwrap();

    let env = vec![
        ("FENCE_POSTGRES_URL", pg_url),
        ("FENCE_POSTGRES_SCHEMA", schema),
        ("FENCE_MYSQL_URL", my_url),
        ("FENCE_MYSQL_DATABASE", database),
        ("FENCE_ETCD_ENDPOINTS", endpoints.join(",")),
        ("FENCE_ETCD_PREFIX", etcd_prefix),
        ("FENCE_DYNAMODB_ENDPOINT", dynamodb_endpoint),
        ("FENCE_DYNAMODB_TABLE", dynamodb.table().to_owned()),
        ("FENCE_DYNAMODB_NAMESPACE", dynamodb.namespace().to_owned()),
        ("FENCE_DYNAMODB_ACCESS_KEY", "fence-test".to_owned()),
        ("FENCE_DYNAMODB_SECRET_KEY", "fence-test".to_owned()),
    ];
    for (backend, lease) in [
        ("postgres", &pg_lease),
        ("mysql", &my_lease),
        ("etcd", &etcd_lease),
        ("dynamodb", &dynamodb_lease),
    ] {
        let json = fence(&env, &["--json", "inspect", backend, "account-9"], b"")
            .expect(0)
            .json();
        let token = lease.token.to_string();
        assert_eq!(json["mark"], token.as_str(), "{backend}");
        assert_eq!(json["entry"]["value"], "100", "{backend}");
        assert_eq!(json["lease"]["owner"], "worker-b", "{backend}");
        assert_eq!(json["lease"]["token"], token.as_str(), "{backend}");
        let op = &json["ops"][0];
        assert_eq!(
            (
                &op["op_id"],
                &op["kind"],
                &op["token"],
                &op["outcome"],
                &op["previous"]
            ),
            (
                &Value::from("deposit 1"),
                &Value::from("write"),
                &Value::from(token.as_str()),
                &Value::from("1"),
                &Value::Null
            ),
            "{backend}: {json}"
        );
        assert_eq!(json["ops"].as_array().map(Vec::len), Some(1), "{backend}");
        let remaining = json["lease"]["remaining_ms"].as_u64().unwrap();
        if backend == "dynamodb" {
            // No server clock: a process counts from its own first sighting of the lease's
            // record version, so a fresh `fence inspect` shows the whole duration.
            assert_eq!(remaining, 60_000, "{backend}");
        } else {
            assert!(
                remaining > 30_000 && remaining <= 60_000,
                "{backend}: {remaining}"
            );
        }
        let next = (lease.token.get() + 2).to_string();
        fence(&env, &["claim", backend, "account-9", &next], b"").expect(0);
        fence(&env, &["claim", backend, "account-9", &token], b"").expect(3);
        // The resource's own issuer gives a token above the lease's.
        let issued = fence(&env, &["--json", "issue", backend, "account-9"], b"")
            .expect(0)
            .json();
        let issued: u64 = issued["token"].as_str().unwrap().parse().unwrap();
        assert!(issued > lease.token.get(), "{backend}: {issued}");
    }

    // Every IAM action DynamoDB's fence needs, probed at the server (an operator's included).
    let permissions = fence(
        &env,
        &["--json", "permissions", "dynamodb", "--operator"],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(
        permissions["permissions"].as_array().map(Vec::len),
        Some(4),
        "{permissions}"
    );

    // Retiring: only when confirmed, never under a live lease, then the domain is gone.
    let (pg_leases, my_leases, etcd_leases) = (postgres.leases(), mysql.leases(), etcd.leases());
    let dynamodb_leases = dynamodb.leases();
    let held: [(&str, &dyn LeaseManager, &fence_core::Lease); 4] = [
        ("postgres", &pg_leases, &pg_lease),
        ("mysql", &my_leases, &my_lease),
        ("etcd", &etcd_leases, &etcd_lease),
        ("dynamodb", &dynamodb_leases, &dynamodb_lease),
    ];
    for (backend, leases, lease) in held {
        let unconfirmed = fence(&env, &["retire", backend, "account-9"], b"").expect(2);
        assert!(
            unconfirmed.stderr.contains("--yes"),
            "{}",
            unconfirmed.stderr
        );
        let refused = fence(&env, &["retire", backend, "account-9", "--yes"], b"").expect(1);
        assert!(refused.stderr.contains("account-9"), "{}", refused.stderr);
        fence(&env, &["inspect", backend, "account-9"], b"").expect(0);
        leases.release(lease).await.unwrap();
        let retired = fence(
            &env,
            &["--json", "retire", backend, "account-9", "--yes"],
            b"",
        )
        .expect(0)
        .json();
        assert!(
            retired["removed"].as_u64().unwrap() >= 1,
            "{backend}: {retired}"
        );
        fence(&env, &["inspect", backend, "account-9"], b"").expect(4);
    }
}

#[test]
fn kafka_ledger_and_manifest_records_decode() {
    let ledger = b"FENCE-KAFKA/1\nhwm 42\nop 42 100 41 batch-7\n";
    let json = fence(&[], &["--json", "decode", "kafka-ledger"], ledger)
        .expect(0)
        .json();
    assert_eq!(json["mark"], "42");
    assert_eq!(json["ops"][0]["outcome"]["records"], 100);
    assert_eq!(json["ops"][0]["previous"], "41");
    fence(
        &[],
        &["decode", "kafka-ledger"],
        b"FENCE-KAFKA/1\nhwm 042\n",
    )
    .expect(5);
    // Kafka headers: a record without the domain header is not fenced; a bad token is corrupt.
    let plain = fence(&[], &["--json", "decode", "kafka-headers"], b"trace=abc\n")
        .expect(0)
        .json();
    assert_eq!(plain["fenced"], false);
    let bad_token = b"fence-domain=orders\nfence-token=042\n";
    fence(&[], &["decode", "kafka-headers"], bad_token).expect(5);
    fence(&[], &["decode", "redis-outbox-entry"], b"17|7\n9:x").expect(5);
    // A Kafka outbox relay's progress record; a damaged one is corrupt.
    let settle = b"FENCE-OUTBOX-PROGRESS/1\tsettle\torder/42\t1841\tx\t1700000000500\tHTTP 500";
    let json = fence(&[], &["--json", "decode", "kafka-outbox-progress"], settle)
        .expect(0)
        .json();
    assert_eq!(json["domain"], "order/42");
    assert_eq!(json["seq"], 1841);
    assert_eq!(json["outcome"], "dead_letter");
    assert_eq!(json["error"], "HTTP 500");
    let begin = b"FENCE-OUTBOX-PROGRESS/1\tbegin\torder/42\t1841\tnine";
    fence(&[], &["decode", "kafka-outbox-progress"], begin).expect(5);
    // Foreign state text: no fence marker.
    fence(&[], &["decode", "redis-state"], b"name someone\n").expect(5);
    let manifest = b"FENCE-MANIFEST/1\nlake/q3/part-0.csv\n";
    let json = fence(&[], &["--json", "decode", "manifest"], manifest)
        .expect(0)
        .json();
    assert_eq!(json["keys"][0], "lake/q3/part-0.csv");
}

/// An outbox on one backend, as the outbox test drives it.
enum TestOutbox {
    Redis(fence_outbox_redis::RedisOutbox),
    Postgres(fence_outbox_postgres::PostgresOutbox),
    Mysql(fence_outbox_mysql::MySqlOutbox),
    Dynamodb(fence_outbox_dynamodb::DynamoDbOutbox),
}

impl TestOutbox {
    /// Records one `enqueue` effect with `payload` for `domain` under `token`.
    async fn record(&self, domain: &fence_core::Domain, token: u64, op: &str, payload: &str) {
        use fence_outbox::Effect;
        let effect = Effect::new("enqueue", "orders-out", payload.to_owned());
        let op = fence_conformance::relay_kit::op(op);
        match self {
            TestOutbox::Redis(outbox) => {
                let transition =
                    fence_outbox_redis::RedisTransition::new(domain.clone(), t(token), op)
                        .effect(effect);
                let script = fence_outbox_redis::OutboxScript::new("return 1");
                outbox.transition(&script, &transition).await.unwrap();
            }
            TestOutbox::Postgres(outbox) => {
                let request = fence_postgres::TransactionRequest::new(domain.clone(), t(token))
                    .with_op_id(op);
                outbox.transition(&request, &[effect]).await.unwrap();
            }
            TestOutbox::Mysql(outbox) => {
                let request =
                    fence_mysql::TransactionRequest::new(domain.clone(), t(token)).with_op_id(op);
                outbox.transition(&request, &[effect]).await.unwrap();
            }
            TestOutbox::Dynamodb(outbox) => {
                let request =
                    fence_core::TransactionRequest::new(domain.clone(), t(token)).with_op_id(op);
                outbox
                    .transition(&request, Vec::new(), &[effect])
                    .await
                    .unwrap();
            }
        }
    }

    async fn entries(&self, domain: &fence_core::Domain) -> Vec<fence_outbox::OutboxEntry> {
        match self {
            TestOutbox::Redis(outbox) => outbox.entries(domain).await.unwrap(),
            TestOutbox::Postgres(outbox) => outbox.entries(domain).await.unwrap(),
            TestOutbox::Mysql(outbox) => outbox.entries(domain).await.unwrap(),
            TestOutbox::Dynamodb(outbox) => outbox.entries(domain).await.unwrap(),
        }
    }

    /// A relay delivering this outbox with the webhook sink, leasing from the same backend.
    fn relay(&self) -> fence_outbox::RelayHandle {
        use std::sync::Arc;
        let config = fence_conformance::relay_kit::fast_relay("cli-relay");
        let sink = fence_conformance::relay_kit::webhook();
        let relay = match self {
            TestOutbox::Redis(outbox) => fence_outbox::Relay::new(
                Arc::new(outbox.clone()),
                sink,
                Arc::new(outbox.fence().leases()),
                config,
            ),
            TestOutbox::Postgres(outbox) => fence_outbox::Relay::new(
                Arc::new(outbox.clone()),
                sink,
                Arc::new(outbox.fence().leases()),
                config,
            ),
            TestOutbox::Mysql(outbox) => fence_outbox::Relay::new(
                Arc::new(outbox.clone()),
                sink,
                Arc::new(outbox.fence().leases()),
                config,
            ),
            TestOutbox::Dynamodb(outbox) => fence_outbox::Relay::new(
                Arc::new(outbox.clone()),
                sink,
                Arc::new(outbox.fence().dynamodb().leases()),
                config,
            ),
        };
        relay.unwrap().spawn()
    }
}

#[tokio::test]
async fn outbox_list_and_discard_on_redis_postgres_mysql_and_dynamodb() {
    use fence_conformance::relay_kit::kinds;
    use fence_conformance::wait::until_async;
    use fence_outbox::EntryStatus;

    let (Some(redis_url), Some(pg_url), Some(my_url), Some(dynamodb_endpoint)) = (
        shared_url(),
        fence_testkit::postgres::shared_url(),
        fence_testkit::mysql::shared_url(),
        fence_testkit::dynamodb::shared_endpoint(),
    ) else {
        unavailable("the shared Redis, PostgreSQL, MariaDB and DynamoDB (moto)");
        return;
    };
    let dynamodb = fence_testkit::dynamodb::shared("cli_outbox").await.unwrap();
    let dynamodb_outbox = fence_outbox_dynamodb::DynamoDbOutbox::new(
        dynamodb.fence(),
        format!("{}-outbox", dynamodb.table()),
        kinds(),
    )
    .unwrap();
    dynamodb_outbox.create_table().await.unwrap();
    let prefix = unique_prefix("cli-outbox");
    let redis_fence = RedisFence::builder()
        .url(&redis_url)
        .prefix(&prefix)
        .connect()
        .await
        .unwrap();
    let schema = fence_testkit::postgres::unique_schema("cli_outbox");
    let pool = fence_testkit::postgres::pool(&pg_url).await;
    fence_postgres::migrate(&pool, &schema).await.unwrap();
    let pg_fence = fence_postgres::PostgresFence::builder(pool, &schema)
        .build()
        .unwrap();
    fence_outbox_postgres::migrate(&pg_fence).await.unwrap();
    let database = fence_testkit::mysql::unique_database("cli_outbox");
    let my_pool = fence_testkit::mysql::pool(&my_url).await;
    fence_mysql::migrate(&my_pool, &database).await.unwrap();
    let my_fence = fence_mysql::MySqlFence::builder(my_pool, &database)
        .build()
        .unwrap();
    fence_outbox_mysql::migrate(&my_fence).await.unwrap();
    let runs = [
        (
            "redis",
            TestOutbox::Redis(fence_outbox_redis::RedisOutbox::new(redis_fence, kinds())),
            vec![
                ("FENCE_REDIS_URL", redis_url.clone()),
                ("FENCE_REDIS_PREFIX", prefix.clone()),
            ],
        ),
        (
            "postgres",
            TestOutbox::Postgres(fence_outbox_postgres::PostgresOutbox::new(
                pg_fence,
                kinds(),
            )),
            vec![
                ("FENCE_POSTGRES_URL", pg_url.clone()),
                ("FENCE_POSTGRES_SCHEMA", schema.clone()),
            ],
        ),
        (
            "mysql",
            TestOutbox::Mysql(fence_outbox_mysql::MySqlOutbox::new(my_fence, kinds())),
            vec![
                ("FENCE_MYSQL_URL", my_url.clone()),
                ("FENCE_MYSQL_DATABASE", database.clone()),
            ],
        ),
        (
            "dynamodb",
            TestOutbox::Dynamodb(dynamodb_outbox.clone()),
            vec![
                ("FENCE_DYNAMODB_ENDPOINT", dynamodb_endpoint.clone()),
                ("FENCE_DYNAMODB_TABLE", dynamodb.table().to_owned()),
                ("FENCE_DYNAMODB_NAMESPACE", dynamodb.namespace().to_owned()),
                ("FENCE_DYNAMODB_ACCESS_KEY", "fence-test".to_owned()),
                ("FENCE_DYNAMODB_SECRET_KEY", "fence-test".to_owned()),
                (
                    "FENCE_DYNAMODB_OUTBOX_TABLE",
                    dynamodb_outbox.table().to_owned(),
                ),
            ],
        ),
    ];
    for (backend, outbox, env) in runs {
        let domain = d("order-5");
        // An effect the webhook sink cannot deliver (an opaque destination) is dead-lettered.
        outbox.record(&domain, 1, "q", "x").await;
        let relay = outbox.relay();
        let (outbox_ref, domain_ref) = (&outbox, &domain);
        until_async(
            &format!("{backend}: a dead letter"),
            Duration::from_secs(10),
            || async move {
                matches!(
                    outbox_ref.entries(domain_ref).await[0].status,
                    EntryStatus::DeadLettered { .. }
                )
            },
        )
        .await;
        relay.shutdown().await.unwrap();
        // A second effect stays pending: no relay runs now.
        outbox.record(&domain, 2, "r", "y").await;

        let json = fence(&env, &["--json", "outbox", "list", backend, "order-5"], b"")
            .expect(0)
            .json();
        assert_eq!(
            (json["pending"].as_u64(), json["dead_lettered"].as_u64()),
            (Some(1), Some(1)),
            "{backend}: {json}"
        );
        assert!(json["lag_ms"].as_u64().is_some(), "{backend}: {json}");
        let entries = json["entries"].as_array().unwrap();
        assert_eq!(entries[0]["status"], "dead-lettered", "{backend}");
        assert!(entries[0]["last_error"]
            .as_str()
            .unwrap()
            .contains("orders-out"));
        assert_eq!(entries[1]["status"], "pending", "{backend}");
        assert_eq!(entries[1]["payload"]["value"], "y", "{backend}");
        assert_eq!(entries[1]["token"], "2", "{backend}");
        let text = fence(&env, &["outbox", "list", backend, "order-5"], b"").expect(0);
        println!("fence outbox list {backend} order-5\n{}", text.stdout);

        // Re-drive: the dead letter is pending again after the last entry, with its key.
        fence(&env, &["outbox", "redrive", backend, "order-5", "2"], b"").expect(4);
        let redriven = fence(
            &env,
            &["--json", "outbox", "redrive", backend, "order-5", "1"],
            b"",
        )
        .expect(0)
        .json();
        assert_eq!(redriven["new_seq"], 3, "{backend}");
        let listed = fence(&env, &["--json", "outbox", "list", backend, "order-5"], b"")
            .expect(0)
            .json();
        let entries = listed["entries"].as_array().unwrap();
        let seen: Vec<_> = entries
            .iter()
            .map(|e| (e["seq"].as_u64(), e["status"].as_str(), e["key"].as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (Some(2), Some("pending"), Some("order-5:2:r:0")),
                (Some(3), Some("pending"), Some("order-5:1:q:0")),
            ],
            "{backend}"
        );
        // The relay delivers both in order (dead-lettered again: the destination is opaque).
        let relay = outbox.relay();
        until_async(
            &format!("{backend}: both settled"),
            Duration::from_secs(10),
            || async move {
                outbox_ref
                    .entries(domain_ref)
                    .await
                    .iter()
                    .all(|e| matches!(e.status, EntryStatus::DeadLettered { .. }))
            },
        )
        .await;
        relay.shutdown().await.unwrap();
        fence(&env, &["outbox", "discard", backend, "order-5", "2"], b"").expect(0);
        fence(&env, &["outbox", "discard", backend, "order-5", "2"], b"").expect(4);
        let left = outbox.entries(&domain).await;
        assert_eq!(
            left.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [3],
            "{backend}"
        );
    }
}

#[tokio::test]
async fn kafka_inspect_shows_the_committed_ledger() {
    use fence_core::{AppendRequest, FencedLog, Record};
    let (Some(bootstrap), Some(kafka)) = (
        fence_testkit::kafka::shared_bootstrap(),
        fence_testkit::kafka::shared_fence("cli").await,
    ) else {
        return;
    };
    let domain = d("partition 7");
    kafka.claim(&domain, t(3)).await.unwrap();
    let append = AppendRequest::new(
        domain.clone(),
        t(3),
        vec![Record::new("a"), Record::new("b")],
    )
    .with_op_id(OperationId::new("batch-1").unwrap());
    kafka.append(&append).await.unwrap();
    let topic = kafka.data_topic().to_owned();
    let env = vec![
        ("FENCE_KAFKA_BOOTSTRAP", bootstrap),
        ("FENCE_KAFKA_TOPIC", topic.clone()),
        ("FENCE_KAFKA_LEDGER_TOPIC", format!("{topic}-ledger")),
        ("FENCE_KAFKA_TRANSACTIONAL_ID_PREFIX", format!("{topic}-")),
    ];
    let json = fence(&env, &["--json", "inspect", "kafka", "partition 7"], b"")
        .expect(0)
        .json();
    assert_eq!(json["mark"], "3");
    assert_eq!(json["entry"]["state"], "absent");
    assert_eq!(json["ops"][0]["op_id"], "batch-1");
    assert_eq!(json["ops"][0]["kind"], "append");
    assert_eq!(json["ops"][0]["outcome"], "2");
    assert_eq!(
        json["location"],
        format!("transactional id `{}`", kafka.transactional_id(&domain)).as_str()
    );
    fence(&env, &["--json", "inspect", "kafka", "never"], b"").expect(4);
    fence(&env, &["claim", "kafka", "partition 7", "2"], b"").expect(3);
    let bad = [("FENCE_KAFKA_PROPERTIES", "secret-without-equals".to_owned())];
    let refused = fence(
        &[env.as_slice(), &bad].concat(),
        &["inspect", "kafka", "x"],
        b"",
    )
    .expect(2);
    assert!(!refused.stderr.contains("secret"), "{}", refused.stderr);
}

#[tokio::test]
async fn permissions_are_named_and_decide_the_exit_code() {
    let (Some(redis_url), Some(pg_url), Some(my_url)) = (
        shared_url(),
        fence_testkit::postgres::shared_url(),
        fence_testkit::mysql::shared_url(),
    ) else {
        unavailable("the shared Redis, PostgreSQL and MariaDB");
        return;
    };
    let redis_env = vec![
        ("FENCE_REDIS_URL", redis_url),
        ("FENCE_REDIS_PREFIX", unique_prefix("cli-perm")),
    ];
    let json = fence(&redis_env, &["--json", "permissions", "redis"], b"")
        .expect(0)
        .json();
    assert_eq!(json["all_granted"], true, "{json}");
    // PING, ROLE, EVALSHA/EVAL, the 15 commands the scripts call and retirement's SCAN.
    assert_eq!(
        json["permissions"].as_array().map(Vec::len),
        Some(19),
        "{json}"
    );

    // A worker's ACL user (FENCE_ACL_COMMANDS alone): granted as a worker (exit 0, SCAN denied
    // and marked as the operators'), refused as an operator (exit 1).
    let user = format!("cli-worker-{}", fence_testkit::unique_suffix());
    let prefix = unique_prefix("cli-worker");
    let mut admin = redis::Client::open(redis_env[0].1.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut rules = vec![
        "SETUSER".to_owned(),
        user.clone(),
        "on".into(),
        ">worker-secret".into(),
        "resetkeys".into(),
        format!("~{prefix}:*"),
        "resetchannels".into(),
        "-@all".into(),
    ];
    rules.extend(
        fence_redis::FENCE_ACL_COMMANDS
            .split_whitespace()
            .map(str::to_owned),
    );
    let _: () = redis::cmd("ACL")
        .arg(&rules)
        .query_async(&mut admin)
        .await
        .unwrap();
    let worker_env = vec![
        (
            "FENCE_REDIS_URL",
            redis_env[0]
                .1
                .replacen("redis://", &format!("redis://{user}:worker-secret@"), 1),
        ),
        ("FENCE_REDIS_PREFIX", prefix),
    ];
    let as_worker = fence(&worker_env, &["--json", "permissions", "redis"], b"");
    let as_operator = fence(&worker_env, &["permissions", "redis", "--operator"], b"");
    let _: u32 = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async(&mut admin)
        .await
        .unwrap();
    let worker = as_worker.expect(0).json();
    assert_eq!(
        (&worker["all_granted"], &worker["granted_for_workers"]),
        (&Value::from(false), &Value::from(true)),
        "{worker}"
    );
    let scan = worker["permissions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "SCAN")
        .unwrap();
    assert_eq!(
        (&scan["access"], &scan["needed_by"]),
        (&Value::from("denied"), &Value::from("operators"))
    );
    let operator = as_operator.expect(1);
    let printed = format!("{}{}", operator.stdout, operator.stderr);
    assert!(printed.contains("DENIED   SCAN [operators]"), "{printed}");

    // A schema nobody migrated: every privilege unknown, exit 1, the remedy named.
    let schema = fence_testkit::postgres::unique_schema("cli_perm");
    let pg_env = vec![
        ("FENCE_POSTGRES_URL", pg_url),
        ("FENCE_POSTGRES_SCHEMA", schema),
    ];
    let out = fence(&pg_env, &["permissions", "postgres"], b"").expect(1);
    let printed = format!("{}{}", out.stdout, out.stderr);
    assert!(printed.contains("run fence_postgres::migrate"), "{printed}");
    // The same on MySQL, and a migrated database whose user has everything passes.
    let database = fence_testkit::mysql::unique_database("cli_perm");
    let my_env = vec![
        ("FENCE_MYSQL_URL", my_url.clone()),
        ("FENCE_MYSQL_DATABASE", database.clone()),
    ];
    let out = fence(&my_env, &["permissions", "mysql"], b"").expect(1);
    let printed = format!("{}{}", out.stdout, out.stderr);
    assert!(printed.contains("run fence_mysql::migrate"), "{printed}");
    fence_mysql::migrate(&fence_testkit::mysql::pool(&my_url).await, &database)
        .await
        .unwrap();
    let granted = fence(
        &my_env,
        &["--json", "permissions", "mysql", "--operator"],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(granted["all_granted"], true, "{granted}");
}
