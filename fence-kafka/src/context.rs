//! The client context of every producer, consumer and admin client fence-kafka opens: where a
//! SASL/OAUTHBEARER token comes from (Amazon MSK with IAM, Confluent Cloud with OAuth, any
//! OIDC provider), and librdkafka's log lines routed to `tracing`.
//!
//! librdkafka asks for a token when it connects and again before the token expires; it runs
//! the provider on its own polling thread, so a provider must not block for long: keep a token
//! refreshed in the background and hand out the current one.

use std::error::Error;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, ProducerContext};

/// Supplies SASL/OAUTHBEARER tokens (the hook MSK IAM signers and OAuth clients plug into).
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use fence_kafka::rdkafka::client::OAuthToken;
///
/// // A token from your identity provider (or `aws_msk_iam_sasl_signer::generate_auth_token`).
/// let provider = |_config: Option<&str>| -> Result<OAuthToken, Box<dyn std::error::Error>> {
///     let expires = SystemTime::now().duration_since(UNIX_EPOCH)? + Duration::from_secs(900);
///     Ok(OAuthToken {
///         token: "eyJhbGciOi...".into(),
///         principal_name: "payments-worker".into(),
///         lifetime_ms: expires.as_millis() as i64,
///     })
/// };
/// let context = fence_kafka::KafkaContext::with_oauth(provider);
/// assert!(context.has_oauth());
/// ```
pub trait OAuthTokenProvider: Send + Sync + 'static {
    /// A token valid now; `config` is librdkafka's `sasl.oauthbearer.config`, if set.
    /// `lifetime_ms` is the token's expiry as milliseconds since the Unix epoch.
    fn token(&self, config: Option<&str>) -> Result<OAuthToken, Box<dyn Error>>;
}

impl<F> OAuthTokenProvider for F
where
    F: Fn(Option<&str>) -> Result<OAuthToken, Box<dyn Error>> + Send + Sync + 'static,
{
    fn token(&self, config: Option<&str>) -> Result<OAuthToken, Box<dyn Error>> {
        self(config)
    }
}

/// The client context fence-kafka opens its clients with; cheap to clone.
#[derive(Clone, Default)]
pub struct KafkaContext {
    oauth: Option<Arc<dyn OAuthTokenProvider>>,
    /// Set once librdkafka asked this client for a token (see [`KafkaContext::for_client`]).
    asked: Arc<AtomicBool>,
    /// What the broker acknowledged of the client's current transaction: kept only for the
    /// transactional producers the fence opens (`None` until [`KafkaContext::start_acks`]).
    acks: Arc<Mutex<Option<Acks>>>,
}

/// The delivery reports of one transaction's records.
///
/// A commit can be refused and still have happened: its first EndTxn answer is lost, librdkafka
/// resends it, and another producer's `init_transactions` bumped the epoch in between, so the
/// resend is answered "fenced" (seen on Apache Kafka 4.4.0 in the torture run). Where every
/// record was acknowledged, their offsets let the fence read back what became of them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Acks {
    /// The records the broker acknowledged with their offset, in the order of their reports.
    pub(crate) acked: Vec<Acked>,
    /// How many records were reported delivered without an offset (librdkafka does so for a
    /// batch the broker answered as a duplicate, and for one acknowledged only through a later
    /// batch): delivered, but not where a read could find them.
    pub(crate) unplaced: usize,
    /// How many records the broker refused.
    pub(crate) refused: usize,
}

impl Acks {
    /// Whether the broker took every one of `records` records.
    pub(crate) fn delivered_all(&self, records: usize) -> bool {
        self.refused == 0 && self.acked.len() + self.unplaced == records
    }
}

/// Where the broker put one record.
#[derive(Clone, Debug)]
pub(crate) struct Acked {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

impl KafkaContext {
    /// A context whose SASL/OAUTHBEARER tokens come from `provider` (with
    /// `security.protocol=SASL_SSL` and `sasl.mechanism=OAUTHBEARER` in the client config).
    pub fn with_oauth(provider: impl OAuthTokenProvider) -> Self {
        KafkaContext {
            oauth: Some(Arc::new(provider)),
            asked: Arc::default(),
            acks: Arc::default(),
        }
    }

    /// The same context for one more client, with a flag of its own that says when librdkafka
    /// asked that client for a token.
    pub(crate) fn for_client(&self) -> Self {
        KafkaContext {
            oauth: self.oauth.clone(),
            asked: Arc::default(),
            acks: Arc::default(),
        }
    }

    /// Forgets the delivery reports of the client's previous transaction.
    pub(crate) fn start_acks(&self) {
        *self.acks.lock().unwrap_or_else(PoisonError::into_inner) = Some(Acks::default());
    }

    /// The delivery reports since [`KafkaContext::start_acks`].
    pub(crate) fn acks(&self) -> Acks {
        self.acks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_default()
    }

    /// True once librdkafka asked the client of this context for a token.
    pub(crate) fn token_asked(&self) -> bool {
        self.asked.load(Ordering::Acquire)
    }

    /// Whether a token provider is set.
    pub fn has_oauth(&self) -> bool {
        self.oauth.is_some()
    }
}

impl fmt::Debug for KafkaContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaContext")
            .field("oauth", &self.has_oauth())
            .finish()
    }
}

impl ClientContext for KafkaContext {
    // librdkafka asks the application only when no built-in method (OIDC, unsecured JWT) is
    // configured, so this is safe for every client.
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, config: Option<&str>) -> Result<OAuthToken, Box<dyn Error>> {
        self.asked.store(true, Ordering::Release);
        match &self.oauth {
            Some(provider) => provider.token(config),
            None => Err("sasl.mechanism=OAUTHBEARER needs a token provider: KafkaFenceBuilder::oauth_token_provider (or sasl.oauthbearer.method=oidc)".into()),
        }
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", fac, "{log_message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{log_message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", fac, "{log_message}");
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", fac, "{log_message}"),
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        tracing::error!(target: "librdkafka", %error, "{reason}");
    }
}

impl ProducerContext for KafkaContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: Self::DeliveryOpaque) {
        let mut acks = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(acks) = acks.as_mut() else {
            return;
        };
        match result {
            Ok(message) if message.offset() >= 0 => acks.acked.push(Acked {
                topic: message.topic().to_owned(),
                partition: message.partition(),
                offset: message.offset(),
            }),
            Ok(_) => acks.unplaced += 1,
            Err(_) => acks.refused += 1,
        }
    }
}

impl ConsumerContext for KafkaContext {}
