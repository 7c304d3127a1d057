//! Fenced data other tools can read, against SeaweedFS: per-object options (content type,
//! metadata, cache control, tags, encryption) reach the object and survive claims and adopt,
//! the verbatim key layout fences an existing layout in place, and plain objects plus a fenced
//! manifest are read by a plain Python csv reader.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use fence_conformance::services::{assert_fenced, domain as d, put, token as t, value_of};
use fence_core::{Fence, FenceError, FencedStore, InvalidInput, Observed, WriteRequest};
use fence_s3::{Encryption, Immutable, KeyLayout, Manifest, ObjectOptions, S3Fence};
use fence_testkit::s3::{self as support, RequestCounter};

/// A fence on the shared server under a unique prefix, built by `configure`, with a plain
/// client (no Fence) on the same bucket and the fence's request counter.
async fn fence_with(
    test: &str,
    configure: impl FnOnce(fence_s3::S3FenceBuilder) -> fence_s3::S3FenceBuilder,
) -> Option<(Observed<S3Fence>, Client, RequestCounter)> {
    let endpoint = support::shared_endpoint()?;
    let (client, counter) = support::counted_client(&endpoint);
    let builder = S3Fence::builder()
        .client(client)
        .bucket(support::BUCKET)
        .prefix(support::unique_prefix(test));
    let fence = configure(builder).connect().await.expect("probe SeaweedFS");
    counter.take();
    Some((fence, support::client(&endpoint), counter))
}

/// What a plain S3 reader sees of an object: its headers, metadata and tags.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    content_type: Option<String>,
    cache_control: Option<String>,
    metadata: BTreeMap<String, String>,
    tags: BTreeMap<String, String>,
}

async fn seen(plain: &Client, key: &str) -> Seen {
    let head = plain
        .head_object()
        .bucket(support::BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
    let tags = plain
        .get_object_tagging()
        .bucket(support::BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
    Seen {
        content_type: head.content_type().map(str::to_owned),
        cache_control: head.cache_control().map(str::to_owned),
        metadata: head
            .metadata()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        tags: tags
            .tag_set()
            .iter()
            .map(|t| (t.key().to_owned(), t.value().to_owned()))
            .collect(),
    }
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn object_options_reach_the_object_and_a_claim_keeps_them() {
    let defaults = ObjectOptions::new()
        .content_type("application/json")
        .metadata("pipeline", "nightly")
        .tag("team", "finance");
    let Some((fence, plain, requests)) =
        fence_with("options", |b| b.object_options(defaults)).await
    else {
        return;
    };
    let domain = d("report");
    let key = fence.object_key(&domain).unwrap();
    put(&fence, &domain, 3, "{}").await.unwrap();
    assert_eq!(
        seen(&plain, &key).await,
        Seen {
            content_type: Some("application/json".into()),
            cache_control: None,
            metadata: map(&[("pipeline", "nightly")]),
            tags: map(&[("team", "finance")]),
        },
        "the builder's options on a plain write"
    );

    let csv = ObjectOptions::new()
        .content_type("text/csv")
        .cache_control("max-age=60")
        .metadata("Source", "erp")
        .tag("team", "sales")
        .tag("stage", "raw data");
    let request = WriteRequest::put(domain.clone(), t(3), "a,b\n1,2\n");
    fence.write_with(&request, &csv).await.unwrap();
    let expected = Seen {
        content_type: Some("text/csv".into()),
        cache_control: Some("max-age=60".into()),
        metadata: map(&[("source", "erp")]),
        tags: map(&[("stage", "raw data"), ("team", "sales")]),
    };
    assert_eq!(seen(&plain, &key).await, expected, "a write's own options");

    // A claim rewrites the object (new mark, same value): the value keeps its options.
    fence.claim(&domain, t(4)).await.unwrap();
    assert_eq!(seen(&plain, &key).await, expected, "options after a claim");
    assert_eq!(
        value_of(&fence, &domain).await.as_deref(),
        Some("a,b\n1,2\n")
    );

    // Options S3 would refuse are refused before any request, and the object is untouched.
    requests.take();
    let bad = ObjectOptions::new().metadata("k", "naïve");
    let refused = fence
        .write_with(&WriteRequest::put(domain.clone(), t(4), "lost?"), &bad)
        .await;
    match refused {
        Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => {
            assert!(why.contains("`report`") && why.contains("ASCII"), "{why}")
        }
        other => panic!("expected invalid options, got {other:?}"),
    }
    assert_eq!(requests.take(), 0, "requests sent for refused options");
    assert_eq!(seen(&plain, &key).await, expected);
    let built = S3Fence::builder()
        .client(plain.clone())
        .bucket(support::BUCKET)
        .object_options(ObjectOptions::new().tag("k", "a;b"))
        .build();
    assert!(matches!(
        built,
        Err(FenceError::InvalidInput(InvalidInput::Configuration(_)))
    ));
}

#[tokio::test]
async fn server_side_encryption_is_requested_on_every_write() {
    let sse = ObjectOptions::new().encryption(Encryption::S3Managed);
    let Some((fence, plain, _)) = fence_with("sse", |b| b.object_options(sse)).await else {
        return;
    };
    let domain = d("secret report");
    put(&fence, &domain, 1, "encrypted at rest").await.unwrap();
    let head = plain
        .head_object()
        .bucket(support::BUCKET)
        .key(fence.object_key(&domain).unwrap())
        .send()
        .await
        .unwrap();
    println!(
        "server-side encryption reported by SeaweedFS: {:?}",
        head.server_side_encryption()
    );
    assert_eq!(
        head.server_side_encryption(),
        Some(&aws_sdk_s3::types::ServerSideEncryption::Aes256)
    );
    assert_eq!(
        value_of(&fence, &domain).await.as_deref(),
        Some("encrypted at rest")
    );
}

#[tokio::test]
async fn adopt_keeps_a_foreign_objects_options() {
    let Some((fence, plain, _)) = fence_with("adopt-options", |b| b).await else {
        return;
    };
    let domain = d("legacy.csv");
    let key = fence.object_key(&domain).unwrap();
    plain
        .put_object()
        .bucket(support::BUCKET)
        .key(&key)
        .content_type("text/csv")
        .cache_control("no-cache")
        .metadata("owner", "etl")
        .tagging("retention=long")
        .body(ByteStream::from_static(b"id,name\n1,ada\n"))
        .send()
        .await
        .unwrap();
    let before = seen(&plain, &key).await;
    assert_eq!(before.tags, map(&[("retention", "long")]));
    fence.adopt(&domain, t(5)).await.unwrap();
    assert_eq!(seen(&plain, &key).await, before, "options after adopt");
    assert_eq!(
        value_of(&fence, &domain).await.as_deref(),
        Some("id,name\n1,ada\n")
    );
    assert_fenced(put(&fence, &domain, 4, "stale").await, 4, 5);
}

#[tokio::test]
async fn the_verbatim_layout_fences_an_existing_layout_in_place() {
    let Some((fence, plain, requests)) =
        fence_with("verbatim", |b| b.key_layout(KeyLayout::Verbatim)).await
    else {
        return;
    };
    let domain = d("sales/2026/part-0.csv");
    let key = format!("{}sales/2026/part-0.csv", fence.prefix());
    assert_eq!(fence.object_key(&domain).unwrap(), key);
    plain
        .put_object()
        .bucket(support::BUCKET)
        .key(&key)
        .body(ByteStream::from_static(b"a,b\n"))
        .send()
        .await
        .unwrap();
    // Another tool's object at the key fails closed until adopted, then is fenced in place.
    assert!(matches!(
        fence.read(&domain).await,
        Err(FenceError::CorruptState { .. })
    ));
    fence.adopt(&domain, t(2)).await.unwrap();
    put(&fence, &domain, 3, "a,b\n1,2\n").await.unwrap();
    assert_fenced(put(&fence, &domain, 2, "stale").await, 2, 3);
    let listed = plain
        .list_objects_v2()
        .bucket(support::BUCKET)
        .prefix(format!("{}sales/2026/", fence.prefix()))
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, [key.as_str()], "one object, at the verbatim key");

    requests.take();
    for bad in ["sales//part-1.csv", "sales/../x", "!data!x", "sales/"] {
        let refused = put(&fence, &d(bad), 9, "x").await;
        assert!(
            matches!(
                refused,
                Err(FenceError::InvalidInput(InvalidInput::DomainNotAKey { .. }))
            ),
            "{bad}: {refused:?}"
        );
    }
    assert_eq!(requests.take(), 0, "requests sent for refused domains");
}

/// Reads the fenced pointer object's raw bytes and the plain parts, as a Python program that
/// knows FORMATS.md would: skip the envelope, list the manifest, parse each part with `csv`.
const PYTHON_READER: &str = r#"
import csv, io, os, sys
root = sys.argv[1]
raw = open(os.path.join(root, "pointer"), "rb").read()
header, payload = raw.split(b"\n\n", 1)
assert header.startswith(b"FENCE-S3/1\n"), header[:20]
lines = payload.decode().split("\n")
assert lines[0] == "FENCE-MANIFEST/1", lines[0]
rows = []
for key in [k for k in lines[1:] if k]:
    with open(os.path.join(root, "objects", key), newline="") as part:
        rows.extend(csv.DictReader(part))
for row in rows:
    print(row["region"], row["amount"])
"#;

#[tokio::test]
async fn plain_objects_and_a_fenced_manifest_are_read_by_a_plain_csv_reader() {
    let Some((fence, plain, _)) = fence_with("manifest", |b| b).await else {
        return;
    };
    let domain = d("sales/current");
    let lake = support::unique_prefix("lake");
    let csv = ObjectOptions::new().content_type("text/csv");
    let parts = [
        (
            format!("{lake}2026/part-0.csv"),
            "region,amount\nnorth,10\n",
        ),
        (
            format!("{lake}2026/part-1.csv"),
            "region,amount\nsouth,32\n",
        ),
    ];
    for (key, body) in &parts {
        let created = fence
            .put_plain(&domain, key, body.as_bytes().to_vec().into(), &csv)
            .await
            .unwrap();
        assert_eq!(created, Immutable::Created(key.clone()));
    }
    let manifest = Manifest::new(parts.iter().map(|(k, _)| k.clone())).unwrap();
    fence
        .write(&WriteRequest::put(domain.clone(), t(8), manifest.encode()))
        .await
        .unwrap();

    // A paused writer with token 7 adds a part and cannot commit a manifest naming it, nor
    // overwrite a committed part.
    let zombie = format!("{lake}2026/part-z.csv");
    fence
        .put_plain(&domain, &zombie, "region,amount\nzombie,666\n".into(), &csv)
        .await
        .unwrap();
    let again = fence
        .put_plain(
            &domain,
            &parts[0].0,
            "region,amount\nzombie,1\n".into(),
            &csv,
        )
        .await
        .unwrap();
    assert_eq!(again, Immutable::AlreadyExists(parts[0].0.clone()));
    let stale = Manifest::new([zombie.clone()]).unwrap();
    // The paused writer is another process: refused on what SeaweedFS holds (its own read of
    // the object), not on what this client saw.
    let (paused, requests) = support::another_process(&fence);
    let refused = paused
        .write(&WriteRequest::put(domain.clone(), t(7), stale.encode()))
        .await;
    assert_fenced(refused, 7, 8);
    assert!(requests.take() > 0, "the refusal never reached SeaweedFS");
    // Plain keys inside the fence's own prefix are refused: they could shadow fenced objects.
    let inside = format!("{}x", fence.prefix());
    assert!(matches!(
        fence.put_plain(&domain, &inside, "x".into(), &csv).await,
        Err(FenceError::InvalidInput(InvalidInput::InvalidKey { .. }))
    ));

    let resolved = fence.resolve(&domain).await.unwrap().unwrap();
    assert_eq!(resolved.manifest, manifest);
    assert_eq!(resolved.token, t(8));

    // What other tools see: plain bytes with the content type, through a client with no Fence.
    let dir =
        std::env::temp_dir().join(format!("fence-readable-{}", fence_testkit::unique_suffix()));
    let pointer = support::raw_get(&plain, &fence.object_key(&domain).unwrap()).await;
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pointer"), &pointer).unwrap();
    for (key, body) in &parts {
        let bytes = support::raw_get(&plain, key).await;
        assert_eq!(
            bytes,
            body.as_bytes(),
            "a plain object is stored as written"
        );
        assert_eq!(
            seen(&plain, key).await.content_type.as_deref(),
            Some("text/csv")
        );
        let path = dir.as_path().join("objects").join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let output = Command::new("python3")
        .arg("-c")
        .arg(PYTHON_READER)
        .arg(dir.as_path())
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs (the test command installs it with the services)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!(
        "python csv reader:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(output.status.success(), "the Python reader failed");
    assert_eq!(stdout, "north 10\nsouth 32\n");
}

#[tokio::test]
async fn a_content_encoding_is_for_plain_objects_only() {
    let Some((fence, plain, requests)) = fence_with("encoding", |b| b).await else {
        return;
    };
    let domain = d("logs/day-1");
    let gzip = ObjectOptions::new().content_encoding("gzip");
    // A fenced object begins with the envelope: labelling it gzip would break its readers.
    let refused = fence
        .write_with(&WriteRequest::put(domain.clone(), t(1), "x"), &gzip)
        .await;
    match refused {
        Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => {
            assert!(why.contains("content encoding `gzip`"), "{why}");
        }
        other => panic!("expected a refused content encoding, got {other:?}"),
    }
    assert_eq!(requests.take(), 0, "nothing was sent for a refused write");
    assert!(S3Fence::builder()
        .client(support::client(&support::shared_endpoint().unwrap()))
        .bucket(support::BUCKET)
        .object_options(gzip.clone())
        .build()
        .is_err());
    // A plain object takes it.
    let plain_key = format!("plain-{}/day-1.log.gz", fence_testkit::unique_suffix());
    let created = fence
        .put_plain(&domain, &plain_key, "gz".into(), &gzip)
        .await
        .unwrap();
    assert_eq!(created, Immutable::Created(plain_key.clone()));
    let head = plain
        .head_object()
        .bucket(support::BUCKET)
        .key(&plain_key)
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_encoding(), Some("gzip"));

    // A foreign gzip object is not adopted, and stays as it was.
    let foreign = d("legacy.log.gz");
    let key = fence.object_key(&foreign).unwrap();
    plain
        .put_object()
        .bucket(support::BUCKET)
        .key(&key)
        .content_encoding("gzip")
        .body(ByteStream::from_static(b"\x1f\x8b"))
        .send()
        .await
        .unwrap();
    match fence.adopt(&foreign, t(2)).await {
        Err(error @ FenceError::Backend { .. }) => {
            assert!(error.to_string().contains("cannot be adopted"), "{error}");
            assert!(!error.is_retryable());
        }
        other => panic!("expected a refused adoption, got {other:?}"),
    }
    assert_eq!(support::raw_get(&plain, &key).await, b"\x1f\x8b");
}
