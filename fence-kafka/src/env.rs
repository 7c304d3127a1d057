//! The environment variables [`KafkaFenceBuilder::from_env`] reads: one set, documented here.
//!
//! | variable | meaning |
//! |---|---|
//! | `FENCE_KAFKA_BOOTSTRAP` | bootstrap servers, `host:port,…` (required, here or as `bootstrap.servers` in the properties) |
//! | `FENCE_KAFKA_PROPERTIES` | librdkafka client properties, `key=value` entries separated by `;` or newlines (security settings) |
//! | `FENCE_KAFKA_PROPERTIES_FILE` | a file of such properties, one `key=value` per line, `#` comments (a Confluent Cloud `client.properties`) |
//! | `FENCE_KAFKA_TOPIC` | the fenced data topic (required) |
//! | `FENCE_KAFKA_LEDGER_TOPIC` | the fence-ledger topic (default `fence-ledger`) |
//! | `FENCE_KAFKA_TRANSACTIONAL_ID_PREFIX` | prefix of the per-domain transactional ids (default `fence`) |
//! | `FENCE_KAFKA_PARTITIONING` | `domain-hash` (default) or `record-key` (see [`crate::Partitioning`]; explicit placement is a function, set on the builder) |
//! | `FENCE_MAX_TOKEN_STEP` | refuse tokens more than this above a domain's ledger mark |
//!
//! A property set twice (in the variable and the file, or `bootstrap.servers` beside
//! `FENCE_KAFKA_BOOTSTRAP`) is refused; `FENCE_ISSUED_ONLY` is refused (Kafka cannot see an
//! issuer). Property values are never echoed: they may be secrets.

use fence_core::env::{configuration, Env};
use fence_core::FenceError;
use rdkafka::config::ClientConfig;

use crate::{KafkaFenceBuilder, Partitioning};

/// Bootstrap servers.
pub const BOOTSTRAP: &str = "FENCE_KAFKA_BOOTSTRAP";
/// Client properties inline.
pub const PROPERTIES: &str = "FENCE_KAFKA_PROPERTIES";
/// A file of client properties.
pub const PROPERTIES_FILE: &str = "FENCE_KAFKA_PROPERTIES_FILE";
/// The data topic.
pub const TOPIC: &str = "FENCE_KAFKA_TOPIC";
/// The ledger topic.
pub const LEDGER_TOPIC: &str = "FENCE_KAFKA_LEDGER_TOPIC";
/// The transactional id prefix.
pub const TRANSACTIONAL_ID_PREFIX: &str = "FENCE_KAFKA_TRANSACTIONAL_ID_PREFIX";
/// `domain-hash` or `record-key`.
pub const PARTITIONING: &str = "FENCE_KAFKA_PARTITIONING";

/// The librdkafka client configuration the variables describe: bootstrap servers and every
/// property (for your own admin clients and consumers of the fenced topics).
pub fn client_config(env: &Env) -> Result<ClientConfig, FenceError> {
    let mut config = ClientConfig::new();
    let mut set = |key: &str, value: &str, source: &str| {
        if config.get(key).is_some() {
            return Err(configuration(format!(
                "the Kafka property `{key}` is set twice ({source} sets it again)"
            )));
        }
        config.set(key, value);
        Ok(())
    };
    if let Some(bootstrap) = env.get(BOOTSTRAP) {
        set("bootstrap.servers", bootstrap.trim(), BOOTSTRAP)?;
    }
    if let Some(inline) = env.get(PROPERTIES) {
        for (key, value) in properties(&inline, PROPERTIES, ';')? {
            set(&key, &value, PROPERTIES)?;
        }
    }
    if let Some(path) = env.get(PROPERTIES_FILE) {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| configuration(format!("{PROPERTIES_FILE}: cannot read `{path}`: {e}")))?;
        for (key, value) in properties(&text, PROPERTIES_FILE, '\n')? {
            set(&key, &value, PROPERTIES_FILE)?;
        }
    }
    if config.get("bootstrap.servers").is_none() {
        return Err(configuration(format!(
            "no Kafka configured: set {BOOTSTRAP} (or bootstrap.servers in {PROPERTIES})"
        )));
    }
    Ok(config)
}

/// `key=value` entries separated by `separator` or newlines; blank entries and `#` comments
/// are skipped. An entry without `=` is named by its position only (it may hold a secret).
fn properties(
    text: &str,
    source: &str,
    separator: char,
) -> Result<Vec<(String, String)>, FenceError> {
    let mut entries = Vec::new();
    for (n, entry) in text.split([separator, '\n']).map(str::trim).enumerate() {
        if entry.is_empty() || entry.starts_with('#') {
            continue;
        }
        let Some((key, value)) = entry.split_once('=') else {
            return Err(configuration(format!(
                "{source}: entry {} has no `=` (key=value entries)",
                n + 1
            )));
        };
        entries.push((key.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(entries)
}

impl KafkaFenceBuilder {
    /// A builder configured from the process environment: see [`crate::env`] for the
    /// variables. Settings made afterwards on the builder override them (a SASL/OAUTHBEARER
    /// token provider is set on the builder: it is code, not configuration).
    ///
    /// ```
    /// use fence_core::env::Env;
    /// // `from_env()` reads the process environment; any other source of settings works alike:
    /// let fence = fence_kafka::KafkaFenceBuilder::from_env_with(&Env::from_pairs([
    ///     ("FENCE_KAFKA_BOOTSTRAP", "broker-1:9092,broker-2:9092"),
    ///     ("FENCE_KAFKA_PROPERTIES", "security.protocol=SASL_SSL;sasl.mechanism=SCRAM-SHA-512"),
    ///     ("FENCE_KAFKA_TOPIC", "payments"),
    /// ]))?
    /// .build()?;
    /// assert_eq!(fence.data_topic(), "payments");
    /// # Ok::<(), fence_core::FenceError>(())
    /// ```
    pub fn from_env() -> Result<Self, FenceError> {
        Self::from_env_with(&Env::process())
    }

    /// A builder configured from `env` (see [`Self::from_env`]).
    pub fn from_env_with(env: &Env) -> Result<Self, FenceError> {
        env.refuse_issued_only("Kafka")?;
        let mut builder =
            KafkaFenceBuilder::new(client_config(env)?).data_topic(env.require(TOPIC)?);
        if let Some(topic) = env.get(LEDGER_TOPIC) {
            builder = builder.ledger_topic(topic);
        }
        if let Some(prefix) = env.get(TRANSACTIONAL_ID_PREFIX) {
            builder = builder.transactional_id_prefix(prefix);
        }
        if let Some(partitioning) = env.get(PARTITIONING) {
            builder = builder.partitioning(match partitioning.trim() {
                "domain-hash" => Partitioning::DomainHash,
                "record-key" => Partitioning::RecordKey,
                _ => {
                    return Err(configuration(format!(
                        "{PARTITIONING} must be `domain-hash` or `record-key` (explicit placement is set on the builder)"
                    )))
                }
            });
        }
        if let Some(step) = env.max_token_step()? {
            builder = builder.max_token_step(step);
        }
        Ok(builder)
    }
}

#[cfg(test)]
#[allow(clippy::panic, clippy::unwrap_used)] // a failed assertion in a test panics
mod tests {
    use super::*;
    use fence_core::InvalidInput;

    fn refused(pairs: &[(&str, &str)]) -> String {
        match KafkaFenceBuilder::from_env_with(&Env::from_pairs(pairs.iter().copied()))
            .and_then(KafkaFenceBuilder::build)
        {
            Err(FenceError::InvalidInput(InvalidInput::Configuration(why))) => why,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn properties_inline_and_from_a_file() {
        let file =
            std::env::temp_dir().join(format!("fence-kafka-{}.properties", std::process::id()));
        std::fs::write(
            &file,
            "# Confluent Cloud\nsecurity.protocol=SASL_SSL\nsasl.mechanisms=PLAIN\nsasl.username = KEY\nsasl.password=s3cret\n",
        )
        .unwrap();
        let env = Env::from_pairs([
            (BOOTSTRAP, "b1:9092"),
            (PROPERTIES, "client.id=fence; linger.ms=5\nacks=all"),
            (PROPERTIES_FILE, file.to_str().unwrap()),
        ]);
        let config = client_config(&env).unwrap();
        std::fs::remove_file(&file).unwrap();
        for (key, value) in [
            ("bootstrap.servers", "b1:9092"),
            ("client.id", "fence"),
            ("linger.ms", "5"),
            ("acks", "all"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.username", "KEY"),
            ("sasl.password", "s3cret"),
        ] {
            assert_eq!(config.get(key), Some(value), "{key}");
        }
        let mut pairs = vec![
            (BOOTSTRAP, "b1:9092"),
            (TOPIC, "payments"),
            (LEDGER_TOPIC, "payments-ledger"),
            (TRANSACTIONAL_ID_PREFIX, "billing"),
            ("FENCE_MAX_TOKEN_STEP", "1000"),
            (PROPERTIES, "sasl.password=s3cret"),
        ];
        let fence = KafkaFenceBuilder::from_env_with(&Env::from_pairs(pairs.clone()))
            .and_then(KafkaFenceBuilder::build)
            .unwrap();
        let domain = fence_core::Domain::new("d").unwrap();
        assert_eq!(fence.transactional_id(&domain), "billing:d");
        assert_eq!(fence.partitioning().name(), "domain-hash");
        assert!(!format!("{fence:?}").contains("s3cret"));
        pairs.push(("FENCE_ISSUED_ONLY", "1"));
        assert!(refused(&pairs).contains("Kafka cannot see an issuer"));
    }

    #[test]
    fn conflicting_and_missing_settings_are_refused() {
        assert!(refused(&[(TOPIC, "t")]).starts_with("no Kafka configured"));
        assert_eq!(
            refused(&[(BOOTSTRAP, "a:1"), (PROPERTIES, "bootstrap.servers=b:2"), (TOPIC, "t")]),
            "the Kafka property `bootstrap.servers` is set twice (FENCE_KAFKA_PROPERTIES sets it again)"
        );
        let why = refused(&[
            (BOOTSTRAP, "a:1"),
            (PROPERTIES, "acks=all;s3cret"),
            (TOPIC, "t"),
        ]);
        assert_eq!(
            why,
            "FENCE_KAFKA_PROPERTIES: entry 2 has no `=` (key=value entries)"
        );
        assert_eq!(
            refused(&[(BOOTSTRAP, "a:1")]),
            "FENCE_KAFKA_TOPIC is not set"
        );
        assert!(refused(&[
            (BOOTSTRAP, "a:1"),
            (TOPIC, "t"),
            (PROPERTIES_FILE, "/no/such/file")
        ])
        .starts_with("FENCE_KAFKA_PROPERTIES_FILE: cannot read"));
        assert!(refused(&[
            (BOOTSTRAP, "a:1"),
            (TOPIC, "t"),
            (PROPERTIES, "transactional.id=x")
        ])
        .contains("do not set transactional.id"));
    }
}
