//! `S3Fence::check_permissions` on a SeaweedFS of the test's own with identities of limited
//! actions: the test's keys have every action, a read-only identity is told which IAM actions
//! it lacks, by name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use fence_core::permissions::{Access, PermissionReport};
use fence_s3::S3Fence;
use fence_testkit::s3 as support;
use support::WeedServer;

async fn report_for(
    server: &WeedServer,
    access: &str,
    secret: &str,
) -> fence_core::permissions::PermissionReport {
    let client = fence_s3::aws_sdk_s3::Client::from_conf(
        support::config(&server.endpoint(), access, secret).build(),
    );
    let fence = S3Fence::builder()
        .client(client)
        .bucket(support::BUCKET)
        .prefix(support::unique_prefix("permissions"))
        .build()
        .unwrap();
    let report = fence.check_permissions().await.unwrap();
    println!("{report}");
    report
}

fn access_of(report: &PermissionReport, name: &str) -> Access {
    report
        .access(name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_missing_action_is_named() {
    let Some(server) = WeedServer::start_with_identities(
        "permissions",
        &[
            ("reader", "reader-secret", &["Read", "List"]),
            ("writer", "writer-secret", &["Write", "List"]),
        ],
    )
    .await
    else {
        return;
    };
    let full = report_for(&server, support::ACCESS_KEY, support::SECRET_KEY).await;
    assert!(full.all_granted(), "{full}");
    assert_eq!(full.permissions.len(), 4);

    let reader = report_for(&server, "reader", "reader-secret").await;
    assert_eq!(
        access_of(&reader, "s3:ListBucket"),
        Access::Granted,
        "{reader}"
    );
    assert!(
        matches!(access_of(&reader, "s3:PutObject"), Access::Denied(_)),
        "{reader}"
    );
    // Without the probe object, reading and deleting it tell nothing.
    assert!(matches!(
        access_of(&reader, "s3:GetObject"),
        Access::Unknown(_)
    ));
    assert!(matches!(
        access_of(&reader, "s3:DeleteObject"),
        Access::Unknown(_)
    ));
    let denied: Vec<&str> = reader.denied().map(|p| p.name.as_str()).collect();
    assert_eq!(denied.len(), 1, "{reader}");

    let writer = report_for(&server, "writer", "writer-secret").await;
    let denied: Vec<&str> = writer.denied().map(|p| p.name.as_str()).collect();
    assert_eq!(denied.len(), 1, "{writer}");
    assert!(denied[0].starts_with("s3:GetObject"), "{writer}");
    assert_eq!(
        access_of(&writer, "s3:DeleteObject"),
        Access::Granted,
        "{writer}"
    );
}
