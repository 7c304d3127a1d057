//! `fence … object-store` against Azurite (Azure Blob through object_store, configured as a
//! user would: `FENCE_OBJECT_STORE_URL=az://…` and object_store's own `AZURE_*` variables):
//! inspect, decode, claim, permissions, retire and qualify; and through `s3://` on s3rver, an
//! S3 server that ignores conditions, qualify refuses without a run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use fence_conformance::services::{domain as d, token as t};
use fence_core::{FencedStore, OperationId, WriteRequest};
use fence_object_store::object_store::path::Path;
use fence_object_store::object_store::{ObjectStore, ObjectStoreExt};
use fence_object_store::ObjectStoreFence;
use fence_testkit::azurite::{self, AzuriteServer};
use fence_testkit::s3 as s3_support;
use futures_util::TryStreamExt;
use support::fence;

/// The command's settings for Azurite's test container: the URL, the prefix, and object_store's
/// own account, key and endpoint variables.
fn azurite_env(server: &AzuriteServer, prefix: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "FENCE_OBJECT_STORE_URL",
            format!("az://{}", azurite::CONTAINER),
        ),
        ("FENCE_OBJECT_STORE_PREFIX", prefix.into()),
        ("AZURE_STORAGE_ACCOUNT_NAME", azurite::ACCOUNT.into()),
        ("AZURE_STORAGE_ACCOUNT_KEY", azurite::ACCOUNT_KEY.into()),
        ("AZURE_STORAGE_ENDPOINT", server.endpoint()),
        ("AZURE_ALLOW_HTTP", "true".into()),
    ]
}

/// The test's own client of the same container.
fn azure(server: &AzuriteServer) -> Arc<dyn ObjectStore> {
    Arc::new(azurite::azure_builder(&server.endpoint()).build().unwrap())
}

async fn objects_under(store: &dyn ObjectStore, prefix: &str) -> usize {
    let folder = Path::from(prefix.trim_end_matches('/'));
    let listed: Vec<_> = store.list(Some(&folder)).try_collect().await.unwrap();
    listed.len()
}

#[tokio::test]
async fn inspect_decode_claim_permissions_and_retire_on_azurite() {
    let Some(server) = AzuriteServer::start("cli-object-store") else {
        return;
    };
    let env = azurite_env(&server, "cli/");
    let library = ObjectStoreFence::builder(azure(&server))
        .prefix("cli/")
        .connect()
        .await
        .unwrap();
    let domain = d("q3 report");
    let request = WriteRequest::put(domain.clone(), t(4), "a,b\n1,2\n")
        .with_op_id(OperationId::new("run-17").unwrap());
    library.write(&request).await.unwrap();

    let json = fence(
        &env,
        &["--json", "inspect", "object-store", "q3 report"],
        b"",
    )
    .expect(0)
    .json();
    let key = library.object_key(&domain).unwrap();
    assert_eq!(json["location"], key.as_str(), "{json}");
    assert_eq!(json["mark"], "4", "{json}");
    assert_eq!(json["entry"]["value"], "a,b\n1,2\n", "{json}");
    assert_eq!(json["ops"][0]["op_id"], "run-17", "{json}");
    assert_eq!(json["details"]["nonce"].as_str().map(str::len), Some(16));

    // decode: the object read through object_store, the same bytes from stdin.
    let decoded = fence(
        &env,
        &["--json", "decode", "s3-envelope", "--store-object", &key],
        b"",
    )
    .expect(0)
    .json();
    assert_eq!(decoded["mark"], "4", "{decoded}");
    assert_eq!(decoded["payload"]["value"], "a,b\n1,2\n", "{decoded}");
    let raw = azure(&server)
        .get(&Path::parse(&key).unwrap())
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let piped = fence(&[], &["--json", "decode", "s3-envelope"], &raw)
        .expect(0)
        .json();
    assert_eq!(piped, decoded);
    fence(
        &env,
        &[
            "decode",
            "s3-envelope",
            "--store-object",
            "cli/no-such-object",
        ],
        b"",
    )
    .expect(4);

    // A claim below the mark is refused by Azurite (exit 3); one above raises it.
    fence(&env, &["claim", "object-store", "q3 report", "3"], b"").expect(3);
    fence(&env, &["claim", "object-store", "q3 report", "6"], b"").expect(0);
    let stale = library
        .write(&WriteRequest::put(domain.clone(), t(5), "late"))
        .await;
    assert!(
        matches!(stale, Err(fence_core::FenceError::Fenced { .. })),
        "{stale:?}"
    );

    // Every operation the fence needs, used for real on a probe object that is then gone.
    let permissions = fence(&env, &["--json", "permissions", "object-store"], b"")
        .expect(0)
        .json();
    assert_eq!(permissions["all_granted"], true, "{permissions}");
    assert_eq!(
        permissions["permissions"].as_array().map(Vec::len),
        Some(5),
        "{permissions}"
    );
    // A wrong account key: every operation denied or unknown, exit 1.
    let mut wrong_key = env.clone();
    wrong_key.retain(|(k, _)| *k != "AZURE_STORAGE_ACCOUNT_KEY");
    wrong_key.push((
        "AZURE_STORAGE_ACCOUNT_KEY",
        azurite::ACCOUNT_KEY.replace('E', "F"),
    ));
    let denied = fence(&wrong_key, &["--json", "permissions", "object-store"], b"")
        .expect(1)
        .json();
    assert_eq!(denied["all_granted"], false, "{denied}");
    // Azurite answered, and refused: the listing and the create are denied (not unknown).
    let access = |i: usize| {
        denied["permissions"][i]["access"]
            .as_str()
            .map(str::to_owned)
    };
    assert_eq!(access(0).as_deref(), Some("denied"), "{denied}");
    assert_eq!(access(1).as_deref(), Some("denied"), "{denied}");

    fence(
        &env,
        &["--json", "retire", "object-store", "q3 report", "--yes"],
        b"",
    )
    .expect(0);
    // A domain with no state is "not found" (exit 4).
    let gone = fence(
        &env,
        &["--json", "inspect", "object-store", "q3 report"],
        b"",
    )
    .expect(4)
    .json();
    assert!(gone["mark"].is_null(), "{gone}");
    assert_eq!(objects_under(&*azure(&server), "cli/").await, 0);
}

#[test]
fn urls_that_cannot_fence_are_refused_before_any_request() {
    for (url, says) in [
        ("file:///tmp/fence-cli-tables", "LocalFileSystem"),
        ("az://container/tables", "FENCE_OBJECT_STORE_PREFIX"),
        // One process's memory: every command would see an empty store.
        ("memory:///", "an empty one"),
    ] {
        let env = vec![("FENCE_OBJECT_STORE_URL", url.to_owned())];
        let run = fence(&env, &["inspect", "object-store", "d"], b"").expect(2);
        assert!(run.stderr.contains(says), "{url}: {}", run.stderr);
    }
}

#[tokio::test]
async fn qualify_runs_on_azurite_and_leaves_only_the_neighbours() {
    let Some(server) = AzuriteServer::start("cli-object-store-qualify") else {
        return;
    };
    let env = azurite_env(&server, "q/");
    let store = azure(&server);
    for key in ["q/qualify-neighbour/x", "q/keep"] {
        store
            .put(&Path::parse(key).unwrap(), "v".into())
            .await
            .unwrap();
    }
    let args = [
        "--json",
        "qualify",
        "object-store",
        "--workers",
        "3",
        "--operations",
        "90",
        "--seed",
        "7",
    ];
    let json = fence(&env, &args, b"").expect(0).json();
    assert_eq!(json["verdict"], "qualified", "{json}");
    let properties = json["properties"].as_array().unwrap();
    assert!(properties.iter().all(|p| p["holds"] == true), "{json}");
    assert!(json["fenced"].as_u64().unwrap() > 0, "{json}");
    assert!(json["accepted"].as_u64().unwrap() > 0, "{json}");
    assert!(
        json["cleanup"].as_str().unwrap().starts_with("removed "),
        "{json}"
    );
    let run_prefix = format!("q/qualify-{}/", json["run"].as_str().unwrap());
    assert_eq!(objects_under(&*store, &run_prefix).await, 0, "{run_prefix}");
    assert_eq!(objects_under(&*store, "q/").await, 2, "neighbours kept");
    // Network faults need a proxy in front of an endpoint the command owns: a usage error.
    let mut faults = args.to_vec();
    faults.push("--network-faults");
    fence(&env, &faults, b"").expect(2);
}

#[tokio::test]
async fn qualify_refuses_an_s3_server_that_ignores_conditions_through_object_store() {
    let Some(server) = s3_support::S3rver::start() else {
        return;
    };
    let env = vec![
        (
            "FENCE_OBJECT_STORE_URL",
            format!("s3://{}", s3_support::BUCKET),
        ),
        ("AWS_ENDPOINT", server.endpoint().to_owned()),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "S3RVER".into()),
        ("AWS_SECRET_ACCESS_KEY", "S3RVER".into()),
        ("AWS_REGION", "us-east-1".into()),
    ];
    let json = fence(&env, &["--json", "qualify", "object-store"], b"")
        .expect(8)
        .json();
    assert_eq!(json["verdict"], "refused", "{json}");
    let reason = json["reason"].as_str().unwrap();
    assert!(reason.contains("ignores conditional writes"), "{reason}");
    assert!(json.get("operations").is_none(), "a run took place: {json}");
}
