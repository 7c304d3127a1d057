//! The conformance suite on etcd's KV, each scenario on an etcd server of its own (so the
//! restart scenario can kill -9 it).
#![allow(clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fence_conformance::{StatePart, StoreHarness};
use fence_core::{BoxError, Domain, FencedStore, Observed};
use fence_etcd::{Etcd, EtcdFence};
use fence_testkit::etcd::EtcdServer;

const PREFIX: &str = "/conformance";

fn fence(etcd: &Etcd) -> Observed<EtcdFence> {
    etcd.fence_builder().max_value_bytes(64 * 1024).build()
}

struct Dedicated {
    server: EtcdServer,
    etcd: Mutex<Etcd>,
    store: Mutex<Observed<EtcdFence>>,
    unreachable: Observed<EtcdFence>,
}

#[async_trait]
impl StoreHarness for Dedicated {
    fn store(&self) -> Arc<dyn FencedStore> {
        Arc::new(self.store.lock().expect("lock").clone())
    }

    fn holder(&self) -> Arc<dyn FencedStore> {
        // A fence of its own: its own cache of what it last saw.
        Arc::new(fence(&self.etcd.lock().expect("lock")))
    }

    async fn restart(&self) -> Result<bool, BoxError> {
        self.server.kill_and_restart();
        let etcd = support::connect(&self.server.endpoint(), PREFIX).await;
        *self.store.lock().expect("lock") = fence(&etcd);
        *self.etcd.lock().expect("lock") = etcd;
        Ok(true)
    }

    fn unreachable_store(&self) -> Option<Arc<dyn FencedStore>> {
        Some(Arc::new(self.unreachable.clone()))
    }

    /// Rewrites the domain's state key, going around Fence: a mark with a leading zero, or an
    /// entry record of a kind Fence never writes.
    async fn corrupt(&self, domain: &Domain, part: StatePart) -> Result<bool, BoxError> {
        let value = match part {
            StatePart::Mark => "fence-store/2 02 value 2 1\nkept",
            StatePart::Entry => "fence-store/2 2 maybe 2 1\nkept",
            _ => return Ok(false),
        };
        let (mut kv, prefix) = {
            let etcd = self.etcd.lock().expect("lock");
            (etcd.client().kv_client(), etcd.prefix().to_owned())
        };
        let key = format!("{prefix}/store/{}/state", domain.escaped());
        kv.put(key, value, None).await?;
        Ok(true)
    }
}

async fn dedicated() -> Option<Dedicated> {
    let server = EtcdServer::start("conformance")?;
    let etcd = support::connect(&server.endpoint(), PREFIX).await;
    let store = Mutex::new(fence(&etcd));
    // The client connects lazily: nothing listens on port 1.
    let unreachable = fence(&support::connect("http://127.0.0.1:1", PREFIX).await);
    Some(Dedicated {
        server,
        etcd: Mutex::new(etcd),
        store,
        unreachable,
    })
}

fence_conformance::store_conformance!(dedicated);

#[tokio::test]
async fn declared_capabilities_are_pinned() {
    use fence_core::{Capabilities, Fence, OpIdRetention};
    // The client connects lazily: nothing needs to listen.
    let caps = fence(&support::connect("http://127.0.0.1:1", PREFIX).await).capabilities();
    assert_eq!(
        caps,
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::per_domain(
                fence_etcd::DEFAULT_OP_ID_RETENTION
            ))
            .with_max_value_bytes(Some(64 * 1024))
            .with_survives_restart(true),
        "a change here changes which conformance scenarios run"
    );
    assert!(caps.write && caps.delete && caps.read && caps.claim && !caps.append);
    assert!(caps.revision_cas && caps.strict_policy && caps.op_id_replay());
}
