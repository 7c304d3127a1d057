//! The fenced side of a store benchmark, shared by every store backend: domains written once
//! beforehand, then puts under one token spread over them.

use std::sync::Arc;

use bytes::Bytes;
use fence_core::{Domain, FencedStore, FencingToken, WriteRequest};

use crate::measure::{done, OpResult};

/// A measured operation's future.
pub(crate) type BoxFuture = std::pin::Pin<Box<dyn std::future::Future<Output = OpResult> + Send>>;

/// `count` domains, each written once with `payload`, so no measured write creates one.
pub(crate) async fn written_domains(
    fence: &dyn FencedStore,
    count: usize,
    payload: &Bytes,
) -> Result<Arc<Vec<Domain>>, String> {
    let domains: Vec<Domain> = (0..count)
        .map(|i| Domain::new(format!("d{i}")))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    for domain in &domains {
        let request = WriteRequest::put(domain.clone(), FencingToken::MIN, payload.clone());
        fence.write(&request).await.map_err(|e| e.to_string())?;
    }
    Ok(Arc::new(domains))
}

/// Put number `i` writes `payload` to domain `i % domains.len()` with the first token.
pub(crate) fn fenced_puts<F>(
    fence: &F,
    domains: &Arc<Vec<Domain>>,
    payload: &Bytes,
) -> impl Fn(usize) -> BoxFuture + Send + Sync + 'static
where
    F: FencedStore + Clone + 'static,
{
    let (fence, domains, payload) = (fence.clone(), domains.clone(), payload.clone());
    move |i| {
        let fence = fence.clone();
        let request = WriteRequest::put(
            domains[i % domains.len()].clone(),
            FencingToken::MIN,
            payload.clone(),
        );
        Box::pin(async move { done(fence.write(&request).await) })
    }
}
