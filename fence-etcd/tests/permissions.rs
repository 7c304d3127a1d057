//! `Etcd::check_permissions` on an etcd of the test's own with authentication: the root user
//! has everything, a role missing one key range is told which, by name.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use fence_core::permissions::Access;
use fence_etcd::etcd_client::Permission as EtcdPermission;
use fence_etcd::Etcd;
use fence_testkit::etcd::EtcdServer;

#[tokio::test]
async fn a_role_missing_a_key_range_is_told_which() {
    let Some(server) = EtcdServer::start("permissions") else {
        return;
    };
    let prefix = "/perm";
    let admin = support::connect(&server.endpoint(), prefix).await;
    let mut client = admin.client().clone();
    client.user_add("root", "root-secret", None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    // The worker's role covers the store, the leases and reading the settings, not the
    // issuer's keys.
    client.role_add("worker").await.unwrap();
    for range in ["store", "lease"] {
        client
            .role_grant_permission(
                "worker",
                EtcdPermission::read_write(format!("{prefix}/{range}/")).with_prefix(),
            )
            .await
            .unwrap();
    }
    client
        .role_grant_permission("worker", EtcdPermission::read(format!("{prefix}/settings")))
        .await
        .unwrap();
    client
        .user_add("worker", "worker-secret", None)
        .await
        .unwrap();
    client.user_grant_role("worker", "worker").await.unwrap();
    client.auth_enable().await.unwrap();

    let endpoint = server.endpoint();
    let as_user = |user: &'static str, password: &'static str| {
        let endpoint = endpoint.clone();
        async move {
            let options = support::options().with_user(user, password);
            Etcd::connect(&[endpoint], Some(options), prefix)
                .await
                .unwrap()
                .check_permissions()
                .await
                .unwrap()
        }
    };
    let root = as_user("root", "root-secret").await;
    println!("{root}");
    assert!(root.all_granted(), "{root}");
    assert_eq!(root.permissions.len(), 5);

    let worker = as_user("worker", "worker-secret").await;
    println!("{worker}");
    let denied: Vec<&str> = worker.denied().map(|p| p.name.as_str()).collect();
    assert_eq!(
        denied,
        [format!("readwrite on `{prefix}/issued/`").as_str()],
        "{worker}"
    );
    assert!(worker
        .permissions
        .iter()
        .filter(|p| !p.name.contains("/issued/"))
        .all(|p| p.access == Access::Granted));
}
