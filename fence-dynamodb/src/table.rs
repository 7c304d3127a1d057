//! `DynamoDb`: the client (its automatic retries off), the table and the namespace every
//! fence, lease manager and issuer of this crate works in; the domain items' keys; reads.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use fence_core::{BoundsConfig, Domain, FenceError, InvalidInput, Observed, Operation};

use crate::error::{backend_error, classify, DynamoDbFenceError};
use crate::expr::Expr;
use crate::item::{attr, text, RawItem, Stored};
use crate::{DynamoDbFence, DynamoDbFenceBuilder, DynamoDbIssuer, DynamoDbLeases};

/// The longest namespace accepted.
pub const MAX_NAMESPACE_BYTES: usize = 256;

/// A DynamoDB table Fence keeps its items in, under one namespace (several namespaces share a
/// table without sharing a domain). The table's partition key is the string attribute `pk`
/// and it has no sort key ([`DynamoDb::create_table`] makes one); a domain's item is
/// `<namespace>/<escaped domain>`. Cloning is cheap.
///
/// The client's automatic retries are turned off for Fence's requests: a conditional write
/// resent after a timeout could apply twice, so Fence retries itself, deciding again on what
/// the table holds, and reports an unknown outcome as [`FenceError::Ambiguous`].
///
/// ```
/// use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
/// let config = aws_sdk_dynamodb::Config::builder()
///     .behavior_version(BehaviorVersion::latest())
///     .region(Region::new("eu-west-1"))
///     .credentials_provider(Credentials::new("key", "secret", None, None, "example"))
///     .build();
/// let dynamodb = fence_dynamodb::DynamoDb::new(
///     aws_sdk_dynamodb::Client::from_conf(config),
///     "fence-locks",
///     "payments",
/// )?;
/// assert_eq!(dynamodb.table(), "fence-locks");
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone)]
pub struct DynamoDb {
    client: Client,
    table: String,
    namespace: String,
    /// The bounds of the fences [`DynamoDb::fence`] builds ([`DynamoDb::from_env`] sets them).
    pub(crate) fence_bounds: BoundsConfig,
}

impl DynamoDb {
    /// Fence's items in `table` under `namespace` (visible ASCII without `/`, 1 to
    /// [`MAX_NAMESPACE_BYTES`] bytes), through `client` (its retries turned off). No I/O.
    pub fn new(
        client: Client,
        table: impl Into<String>,
        namespace: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        let (table, namespace) = (table.into(), namespace.into());
        check_table(&table)?;
        check_namespace(&namespace)?;
        let client = Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_config(RetryConfig::disabled())
                .build(),
        );
        Ok(DynamoDb {
            client,
            table,
            namespace,
            fence_bounds: BoundsConfig::NONE,
        })
    }

    /// As [`DynamoDb::new`], with a client from an `SdkConfig` (your usual AWS configuration).
    pub fn from_sdk_config(
        config: &aws_types::SdkConfig,
        table: impl Into<String>,
        namespace: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        Self::new(Client::new(config), table, namespace)
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The client Fence sends its requests with (retries off): for your own requests, such
    /// as building the actions of a fenced transaction.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The partition key of `domain`'s item.
    pub fn item_key(&self, domain: &Domain) -> String {
        format!("{}/{}", self.namespace, domain.escaped())
    }

    /// A builder for a fenced store in this table and namespace.
    pub fn fence_builder(&self) -> DynamoDbFenceBuilder {
        DynamoDbFenceBuilder::new(self.clone())
    }

    /// The fenced store with the defaults, inside the telemetry layer.
    pub fn fence(&self) -> Observed<DynamoDbFence> {
        self.fence_builder().into_fence()
    }

    /// Leases on the domains' items, inside the telemetry layer.
    pub fn leases(&self) -> Observed<DynamoDbLeases> {
        Observed::new(DynamoDbLeases::new(self.clone()))
    }

    /// A token issuer on the domains' items (one sequence with [`DynamoDb::leases`]), inside
    /// the telemetry layer.
    pub fn issuer(&self) -> Observed<DynamoDbIssuer> {
        Observed::new(DynamoDbIssuer::new(self.clone()))
    }

    /// Creates the table (partition key `pk`, a string; on-demand billing) and waits until it
    /// is `ACTIVE`. An existing table of that name is an error: Fence never alters a table.
    pub async fn create_table(&self) -> Result<(), FenceError> {
        let key = KeySchemaElement::builder()
            .attribute_name(attr::PK)
            .key_type(KeyType::Hash)
            .build()
            .map_err(unexpected_build)?;
        let definition = AttributeDefinition::builder()
            .attribute_name(attr::PK)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(unexpected_build)?;
        let request = self
            .client
            .create_table()
            .table_name(&self.table)
            .key_schema(key)
            .attribute_definitions(definition)
            .billing_mode(BillingMode::PayPerRequest);
        create_table(&self.client, request, &self.table).await
    }

    /// The key of `domain`'s item, as a request names it.
    pub(crate) fn key(
        &self,
        domain: &Domain,
    ) -> HashMap<String, aws_sdk_dynamodb::types::AttributeValue> {
        HashMap::from([(attr::PK.to_owned(), text(self.item_key(domain)))])
    }

    /// One conditional `UpdateItem` of `domain`'s item: `condition` and `update` use `expr`'s
    /// names and values. When the condition fails DynamoDB returns the item as it is now.
    pub(crate) async fn update(
        &self,
        domain: &Domain,
        expr: &Expr,
        (condition, update): (String, String),
    ) -> Result<(), crate::error::Failure> {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key(domain)))
            .condition_expression(condition)
            .update_expression(update)
            .set_expression_attribute_names(expr.names())
            .set_expression_attribute_values(expr.values())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(e, &self.table))
    }

    /// Reads `domain`'s item (strongly consistent).
    pub(crate) async fn read(
        &self,
        domain: &Domain,
        operation: Operation,
    ) -> Result<Stored, FenceError> {
        let raw = self.read_raw(domain, operation).await?;
        Stored::decode(domain, raw.as_ref())
    }

    /// Reads `domain`'s item as it is, without its key attribute.
    pub(crate) async fn read_raw(
        &self,
        domain: &Domain,
        operation: Operation,
    ) -> Result<Option<RawItem>, FenceError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key(domain)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(e, &self.table).into_fence_error(domain, operation, false))?;
        Ok(output.item.map(without_key))
    }
}

/// Sends `request` (a `CreateTable` of `table`) and waits until the table is `ACTIVE`.
pub(crate) async fn create_table(
    client: &Client,
    request: aws_sdk_dynamodb::operation::create_table::builders::CreateTableFluentBuilder,
    table: &str,
) -> Result<(), FenceError> {
    request
        .send()
        .await
        .map_err(|e| table_error(classify(e, table)))?;
    for _ in 0..600 {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| table_error(classify(e, table)))?;
        let active = described
            .table()
            .and_then(|t| t.table_status())
            .is_some_and(|s| s.as_str() == "ACTIVE");
        if active {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(backend_error(
        None,
        DynamoDbFenceError::Unexpected(format!("table `{table}` never became ACTIVE")),
    ))
}

/// A table-level failure (no domain).
fn table_error(failure: crate::error::Failure) -> FenceError {
    use crate::error::Failure;
    let source = match failure {
        Failure::NotApplied(e) | Failure::MaybeApplied(e) | Failure::Refused(e) => e,
        other => DynamoDbFenceError::Unexpected(format!("{other:?}")),
    };
    backend_error(None, source)
}

/// An item without its partition key (what [`Stored::decode`] reads).
pub(crate) fn without_key(mut item: RawItem) -> RawItem {
    item.remove(attr::PK);
    item
}

fn unexpected_build(error: aws_sdk_dynamodb::error::BuildError) -> FenceError {
    backend_error(None, DynamoDbFenceError::Unexpected(error.to_string()))
}

pub(crate) fn check_table(table: &str) -> Result<(), InvalidInput> {
    // DynamoDB's rule: 3 to 255 of [a-zA-Z0-9_.-].
    let valid = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(InvalidInput::Configuration(format!(
            "dynamodb table name `{}`: 3 to 255 characters of a-z, A-Z, 0-9, `_`, `.` and `-`",
            table.chars().take(80).collect::<String>()
        )))
    }
}

pub(crate) fn check_namespace(namespace: &str) -> Result<(), InvalidInput> {
    let refuse = |reason: &str| {
        Err(InvalidInput::Configuration(format!(
            "dynamodb namespace `{}`: {reason}",
            namespace.chars().take(80).collect::<String>()
        )))
    };
    if namespace.is_empty() {
        return refuse("empty (use e.g. `fence`)");
    }
    if namespace.len() > MAX_NAMESPACE_BYTES {
        return refuse("longer than 256 bytes");
    }
    if !namespace.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return refuse("only visible ASCII characters other than `/` are allowed");
    }
    Ok(())
}

impl fmt::Debug for DynamoDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client's configuration holds credentials: never printed.
        f.debug_struct("DynamoDb")
            .field("table", &self.table)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_domains_never_share_an_item() {
        for bad in ["", "ab", "a b c", "tab/le"] {
            assert!(check_table(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "a/b", "a b", &"x".repeat(257)] {
            assert!(check_namespace(bad).is_err(), "{bad:?}");
        }
        assert!(check_table("fence-locks.v1_2").is_ok());
        assert!(check_namespace("payments").is_ok());
    }
}
