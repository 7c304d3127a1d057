//! `WebhookSink`: POSTs each entry's payload to its destination URL with an `Idempotency-Key`.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{ConfigBuilderExt, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::effect::http_url;
use crate::entry::OutboxEntry;
use crate::error::OutboxError;
use crate::sink::{Sink, SinkError};

/// The header carrying the idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// The header carrying the effect kind.
pub const EFFECT_KIND_HEADER: &str = "fence-effect-kind";
/// The longest response body kept in an error message.
const ERROR_BODY_BYTES: usize = 512;

/// How the webhook sink reads `409 Conflict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictRule {
    /// A request with the same key is still being processed (Stripe, the IETF
    /// `Idempotency-Key` draft): retry later. The default.
    Retry,
    /// The receiver already holds this key's effect and answers 409 instead of replaying
    /// the first response: count it as delivered.
    Delivered,
}

/// An HTTP webhook sink: POSTs the payload to the entry's destination (an `http://` or
/// `https://` URL, rustls with the platform's roots) with `Idempotency-Key: <entry key>`.
///
/// | answer | verdict |
/// |---|---|
/// | 2xx | delivered |
/// | 409 Conflict | per [`ConflictRule`] (default: retry, the key is in flight) |
/// | 422 Unprocessable | permanent: the receiver refuses this payload, or this key with another payload; dead-letter |
/// | 408, 425, 429, 5xx | retryable, honouring `Retry-After` seconds |
/// | other 1xx/3xx/4xx | permanent (redirects are not followed) |
/// | timeout, connection error | retryable |
/// | destination not an http(s) URL | permanent |
#[derive(Clone)]
pub struct WebhookSink {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    content_type: HeaderValue,
    headers: Vec<(HeaderName, HeaderValue)>,
    conflict: ConflictRule,
}

impl fmt::Debug for WebhookSink {
    // Extra headers may carry credentials: only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("WebhookSink")
            .field("timeout", &self.timeout)
            .field("content_type", &self.content_type)
            .field("headers", &names)
            .field("conflict", &self.conflict)
            .finish()
    }
}

impl WebhookSink {
    /// A sink with a 10 s timeout and `Content-Type: application/json`, trusting the
    /// platform's root certificates. On a machine without any, https destinations fail
    /// certificate checks (retried, then dead-lettered with that error) and a warning is
    /// logged; give roots with [`WebhookSink::with_tls`].
    pub fn new() -> Result<Self, OutboxError> {
        let tls = match rustls::ClientConfig::builder().with_native_roots() {
            Ok(builder) => builder.with_no_client_auth(),
            Err(error) => {
                tracing::warn!(%error, "no platform root certificates: https webhooks will fail certificate checks");
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            }
        };
        Self::with_tls(tls)
    }

    /// A sink with your TLS configuration (private roots, client certificates). Leave its
    /// ALPN protocols empty: the sink speaks HTTP/1.1.
    pub fn with_tls(tls: rustls::ClientConfig) -> Result<Self, OutboxError> {
        if !tls.alpn_protocols.is_empty() {
            return Err(OutboxError::Configuration(
                "leave the TLS config's ALPN protocols empty: the sink sets them".into(),
            ));
        }
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(WebhookSink {
            client: Client::builder(TokioExecutor::new()).build(https),
            timeout: Duration::from_secs(10),
            content_type: HeaderValue::from_static("application/json"),
            headers: Vec::new(),
            conflict: ConflictRule::Retry,
        })
    }

    /// Sets the per-request timeout (connect, send and response).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the `Content-Type` of every request.
    pub fn content_type(mut self, value: &str) -> Result<Self, OutboxError> {
        self.content_type = HeaderValue::from_str(value)
            .map_err(|e| OutboxError::Configuration(format!("content type `{value}`: {e}")))?;
        Ok(self)
    }

    /// Adds a header to every request (an API key, for example; it is never logged).
    pub fn header(mut self, name: &str, value: &str) -> Result<Self, OutboxError> {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| OutboxError::Configuration(format!("header name `{name}`: {e}")))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|e| OutboxError::Configuration(format!("value of header `{name}`: {e}")))?;
        value.set_sensitive(true);
        self.headers.push((name, value));
        Ok(self)
    }

    /// Sets how `409 Conflict` is read.
    pub fn on_conflict(mut self, rule: ConflictRule) -> Self {
        self.conflict = rule;
        self
    }

    fn request(&self, entry: &OutboxEntry) -> Result<Request<Full<Bytes>>, SinkError> {
        http_url(&entry.destination).map_err(|reason| {
            SinkError::permanent(format!("destination `{}` {reason}", entry.destination))
        })?;
        let key = HeaderValue::from_str(entry.key.as_str()).map_err(|e| {
            SinkError::permanent(format!("idempotency key is not a header value: {e}"))
        })?;
        let kind = HeaderValue::from_str(&entry.kind)
            .map_err(|e| SinkError::permanent(format!("effect kind is not a header value: {e}")))?;
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(entry.destination.as_str())
            .header(CONTENT_TYPE, self.content_type.clone())
            .header(IDEMPOTENCY_KEY_HEADER, key)
            .header(EFFECT_KIND_HEADER, kind);
        for (name, value) in &self.headers {
            builder = builder.header(name, value.clone());
        }
        builder
            .body(Full::new(entry.payload.clone()))
            .map_err(|e| SinkError::permanent(format!("destination `{}`: {e}", entry.destination)))
    }

    fn verdict(
        &self,
        status: StatusCode,
        retry_after: Option<Duration>,
        body: &str,
    ) -> Result<(), SinkError> {
        let reason = if body.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {body}")
        };
        match status.as_u16() {
            200..=299 => Ok(()),
            409 if self.conflict == ConflictRule::Delivered => Ok(()),
            409 | 408 | 425 | 429 | 500..=599 => Err(SinkError::Retryable {
                reason,
                retry_after,
            }),
            _ => Err(SinkError::permanent(reason)),
        }
    }
}

#[async_trait]
impl Sink for WebhookSink {
    async fn deliver(&self, entry: &OutboxEntry) -> Result<(), SinkError> {
        let request = self.request(entry)?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| SinkError::retryable(format!("request failed: {e}")))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let body = response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let text =
                String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_BYTES)]).into_owned();
            self.verdict(status, retry_after, text.trim())
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(verdict) => verdict,
            Err(_) => Err(SinkError::retryable(format!(
                "no answer from {} within {:?}",
                entry.destination, self.timeout
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_documented_verdicts() -> Result<(), OutboxError> {
        let sink = WebhookSink::new()?;
        let verdict = |code: u16| {
            sink.verdict(
                StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT),
                None,
                "",
            )
        };
        for ok in [200, 201, 202, 204] {
            assert_eq!(verdict(ok), Ok(()), "{ok}");
        }
        for retry in [408, 409, 425, 429, 500, 502, 503, 504] {
            assert!(
                matches!(verdict(retry), Err(SinkError::Retryable { .. })),
                "{retry}"
            );
        }
        for permanent in [301, 400, 401, 403, 404, 410, 413, 422] {
            assert!(
                matches!(verdict(permanent), Err(SinkError::Permanent { .. })),
                "{permanent}"
            );
        }
        let lenient = sink.on_conflict(ConflictRule::Delivered);
        assert_eq!(lenient.verdict(StatusCode::CONFLICT, None, ""), Ok(()));
        Ok(())
    }

    #[test]
    fn extra_headers_are_redacted_in_debug() -> Result<(), OutboxError> {
        let sink = WebhookSink::new()?.header("authorization", "Bearer sk_live_secret")?;
        let shown = format!("{sink:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("sk_live_secret"),
            "{shown}"
        );
        assert!(WebhookSink::new()?.header("bad header", "x").is_err());
        Ok(())
    }
}
