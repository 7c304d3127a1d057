//! Bad input and foreign state against SeaweedFS: typed errors, and nothing overwritten.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_core::{
    Domain, Fence, FenceError, FencedStore, FencingToken, InvalidInput, WriteRequest,
};
use fence_s3::{S3Fence, S3FenceError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn put(domain: &Domain, token: u64) -> WriteRequest {
    WriteRequest::put(
        domain.clone(),
        FencingToken::new(token).unwrap(),
        "fenced value",
    )
}

async fn raw_put(key: &str, body: &'static [u8]) {
    let client = support::client(&support::shared_endpoint().unwrap());
    client
        .put_object()
        .bucket(support::BUCKET)
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(body))
        .send()
        .await
        .unwrap();
}

async fn raw_get(key: &str) -> Vec<u8> {
    let client = support::client(&support::shared_endpoint().unwrap());
    let object = client
        .get_object()
        .bucket(support::BUCKET)
        .key(key)
        .send()
        .await
        .unwrap();
    object.body.collect().await.unwrap().into_bytes().to_vec()
}

fn source_of(error: &FenceError) -> Option<&S3FenceError> {
    match error {
        FenceError::Backend { source, .. } => source.downcast_ref(),
        _ => None,
    }
}

#[tokio::test]
async fn corrupt_fence_state_fails_closed_and_is_left_alone() {
    let Some((fence, _)) = support::shared_fence("corrupt").await else {
        return;
    };
    let cases: [(&str, &[u8]); 4] = [
        ("thirty-digit-token", b"FENCE-S3/1\nhwm 123456789012345678901234567890\nentry none\nnonce 0000000000000001\n\npayload"),
        ("leading-zero", b"FENCE-S3/1\nhwm 007\nentry none\nnonce 0000000000000001\n\npayload"),
        ("no-end-of-header", b"FENCE-S3/1\nhwm 7\nentry none\nnonce 0000000000000001\n"),
        ("unknown-line", b"FENCE-S3/1\nhwm 7\nentry none\nnonce 0000000000000001\nowner mallory\n\npayload"),
    ];
    for (name, body) in cases {
        let domain = Domain::new(name).unwrap();
        let key = fence.object_key(&domain);
        raw_put(&key, body).await;
        for result in [
            fence.write(&put(&domain, 9)).await.map(|_| ()),
            fence.read(&domain).await.map(|_| ()),
            fence
                .claim(&domain, FencingToken::new(9).unwrap())
                .await
                .map(|_| ()),
            fence.high_water_mark(&domain).await.map(|_| ()),
        ] {
            assert!(
                matches!(result, Err(FenceError::CorruptState { .. })),
                "{name}: {result:?}"
            );
        }
        assert_eq!(raw_get(&key).await, body, "{name}: nothing overwritten");
    }
}

#[tokio::test]
async fn a_foreign_object_fails_closed_until_adopted() {
    let Some((fence, _)) = support::shared_fence("foreign").await else {
        return;
    };
    let domain = Domain::new("legacy-report").unwrap();
    let key = fence.object_key(&domain);
    raw_put(&key, b"written by another tool").await;
    match fence.write(&put(&domain, 5)).await {
        Err(FenceError::CorruptState { detail, .. }) => {
            assert!(detail.contains("adopt"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(raw_get(&key).await, b"written by another tool");

    let adopted = fence
        .adopt(&domain, FencingToken::new(5).unwrap())
        .await
        .unwrap();
    assert_eq!(adopted.revision.get(), 1);
    let snapshot = fence.read(&domain).await.unwrap();
    assert_eq!(
        snapshot.value().map(|v| v.to_vec()),
        Some(b"written by another tool".to_vec())
    );
    assert_eq!(snapshot.high_water_mark, FencingToken::new(5).ok());
    assert!(fence
        .write(&put(&domain, 4))
        .await
        .is_err_and(|e| e.is_fenced()));
    fence.write(&put(&domain, 5)).await.unwrap();
    let again = fence.adopt(&domain, FencingToken::new(6).unwrap()).await;
    assert!(
        matches!(
            again.as_ref().map_err(source_of),
            Err(Some(S3FenceError::AlreadyFenced))
        ),
        "{again:?}"
    );
}

#[tokio::test]
async fn an_oversized_object_is_refused_before_any_io() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let requests = support::RequestCounter::default();
    let client = aws_sdk_s3::Client::from_conf(
        support::config(&endpoint, support::ACCESS_KEY, support::SECRET_KEY)
            .interceptor(requests.clone())
            .build(),
    );
    let fence = S3Fence::builder()
        .client(client)
        .bucket(support::BUCKET)
        .prefix(support::unique_prefix("size"))
        .max_value_bytes(1024)
        .build()
        .unwrap();
    let domain = Domain::new("big").unwrap();
    let request = WriteRequest::put(
        domain.clone(),
        FencingToken::new(1).unwrap(),
        vec![0u8; 1025],
    );
    match fence.write(&request).await {
        Err(FenceError::InvalidInput(InvalidInput::ValueTooLarge {
            size: 1025,
            max: 1024,
            ..
        })) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(requests.take(), 0, "refused before any request");
    assert_eq!(fence.high_water_mark(&domain).await.unwrap(), None);
}

#[tokio::test]
async fn wrong_credentials_and_a_missing_bucket_are_typed_errors() {
    let Some(endpoint) = support::shared_endpoint() else {
        return;
    };
    let bad_keys = aws_sdk_s3::Client::from_conf(
        support::config(&endpoint, support::ACCESS_KEY, "not-the-secret").build(),
    );
    let refused = S3Fence::builder()
        .client(bad_keys)
        .bucket(support::BUCKET)
        .prefix(support::unique_prefix("creds"))
        .connect()
        .await;
    let error = refused.expect_err("wrong credentials must not connect");
    assert!(
        matches!(source_of(&error), Some(S3FenceError::AccessDenied { .. })),
        "{error:?}"
    );

    let bucket = format!(
        "fence-missing-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let missing = S3Fence::builder()
        .client(support::client(&endpoint))
        .bucket(&bucket)
        .connect()
        .await;
    let error = missing.expect_err("a missing bucket must not connect");
    assert!(
        matches!(source_of(&error), Some(S3FenceError::NoSuchBucket { .. })),
        "{error:?}"
    );
    assert!(error.to_string().contains(&bucket), "{error}");
}

#[tokio::test]
async fn bad_configuration_is_refused_without_io() {
    let client = support::client("http://127.0.0.1:1");
    let refused = |b: fence_s3::S3FenceBuilder| {
        matches!(
            b.build(),
            Err(FenceError::InvalidInput(InvalidInput::Configuration(_)))
        )
    };
    assert!(refused(S3Fence::builder().bucket("b")));
    assert!(refused(S3Fence::builder().client(client.clone())));
    assert!(refused(
        S3Fence::builder()
            .client(client.clone())
            .bucket("b")
            .part_size(1024)
    ));
    assert!(refused(
        S3Fence::builder()
            .client(client.clone())
            .bucket("b")
            .op_id_retention(1000)
    ));
    assert!(refused(
        S3Fence::builder().client(client).bucket("b").prefix("a\nb")
    ));
}

/// Answers 200 with an ETag to every request, whatever its conditions: what a naive proxy or
/// emulator does.
async fn condition_ignoring_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    // One request: headers, then a Content-Length body or a chunked body.
                    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok());
                    let chunked = head.contains("transfer-encoding: chunked");
                    let body_start = end + 4;
                    let complete = |buf: &[u8]| match (length, chunked) {
                        (Some(n), _) => (buf.len() >= body_start + n).then_some(body_start + n),
                        (None, true) => buf[body_start..]
                            .windows(5)
                            .position(|w| w == b"0\r\n\r\n")
                            .map(|p| body_start + p + 5),
                        (None, false) => Some(body_start),
                    };
                    let Some(request_end) = complete(&buffer) else {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    buffer.drain(..request_end);
                    let reply = "HTTP/1.1 200 OK\r\nETag: \"d41d8cd98f00b204e9800998ecf8427e\"\r\nContent-Length: 0\r\n\r\n";
                    if socket.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn an_endpoint_that_ignores_conditions_is_refused() {
    let endpoint = condition_ignoring_endpoint().await;
    let fence = S3Fence::builder()
        .client(support::client(&endpoint))
        .bucket("any")
        .build()
        .unwrap();
    let error = fence
        .probe()
        .await
        .expect_err("the probe must refuse this endpoint");
    assert!(
        matches!(
            source_of(&error),
            Some(S3FenceError::ConditionsIgnored { .. })
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("ignores conditional writes"),
        "{error}"
    );
    // Writes refuse too: the probe runs before the first write.
    let write = fence.write(&put(&Domain::new("d").unwrap(), 1)).await;
    assert!(
        matches!(
            write.as_ref().map_err(source_of),
            Err(Some(S3FenceError::ConditionsIgnored { .. }))
        ),
        "{write:?}"
    );
}
