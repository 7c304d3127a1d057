//! Condition and update expressions: the attribute names and values one request uses (DynamoDB
//! refuses names or values a request's expressions do not use), and the acceptance rule as
//! DynamoDB evaluates it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use fence_core::{EqualTokenPolicy, FencingToken};

use crate::item::{attr, number};

/// The names and values of one request's expressions (also for extensions:
/// `extension::Expr`).
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))]
pub struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

#[cfg_attr(not(feature = "unstable-raw"), allow(unreachable_pub))]
impl Expr {
    /// `#attribute`, registered.
    pub fn name(&mut self, attribute: &str) -> String {
        let placeholder = format!("#{attribute}");
        self.names.insert(placeholder.clone(), attribute.to_owned());
        placeholder
    }

    /// `:key`, bound to `value`.
    pub fn value(&mut self, key: &str, value: AttributeValue) -> String {
        let placeholder = format!(":{key}");
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    /// The names, `None` when there are none (DynamoDB refuses an empty map).
    pub fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    /// The values, `None` when there are none.
    pub fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }

    /// The acceptance rule on the item's mark, as DynamoDB evaluates it in the same request
    /// as the change: no mark yet, or the mark at most the token (below it under
    /// [`EqualTokenPolicy::Strict`]). DynamoDB compares numbers exactly (38 digits).
    pub(crate) fn admits(&mut self, token: FencingToken, policy: EqualTokenPolicy) -> String {
        self.admits_on(attr::MARK, token, policy)
    }

    /// The acceptance rule, as the fence's own conditions state it on the mark, on another
    /// attribute holding a mark (an extension's: an outbox's newest relay token), so the rule
    /// DynamoDB evaluates exists once.
    pub fn admits_on(
        &mut self,
        attribute: &str,
        token: FencingToken,
        policy: EqualTokenPolicy,
    ) -> String {
        let mark = self.name(attribute);
        let token = self.value("token", number(token.get()));
        // Any policy but same-owner admits less: closed by default.
        let comparison = match policy {
            EqualTokenPolicy::SameOwner => "<=",
            _ => "<",
        };
        format!("(attribute_not_exists({mark}) OR {mark} {comparison} {token})")
    }

    /// The store's version is still `version` (0: the store never changed).
    pub(crate) fn at_version(&mut self, version: u64) -> String {
        let ver = self.name(attr::VER);
        if version == 0 {
            format!("attribute_not_exists({ver})")
        } else {
            let known = self.value("version", number(version));
            format!("{ver} = {known}")
        }
    }

    /// The domain's counter is still `counter` (`None`: none yet).
    pub(crate) fn counter_is(&mut self, counter: Option<FencingToken>) -> String {
        let ctr = self.name(attr::COUNTER);
        match counter {
            None => format!("attribute_not_exists({ctr})"),
            Some(counter) => {
                let known = self.value("counter", number(counter.get()));
                format!("{ctr} = {known}")
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::collections::HashMap;

    use aws_sdk_dynamodb::types::AttributeValue;
    use fence_core::raw::rule;
    use fence_core::{Domain, EqualTokenPolicy, FencingToken};

    use super::Expr;
    use crate::item::{attr, number};

    const EDGE: u64 = 1 << 53;
    const TOKENS: [u64; 7] = [1, EDGE, EDGE + 1, 1 << 63, u64::MAX - 1, u64::MAX, 2];

    /// The rule's copy in the condition, alone, evaluated by the server on each mark and token
    /// (both sides of the doubles' edge, u64's last two) under both policies: it must admit
    /// exactly what fence-core's rule admits. In the fence the store version is compared too,
    /// and fails first whenever the mark moved, so only this test shows what the copy decides.
    #[tokio::test]
    async fn the_condition_admits_exactly_what_the_rule_admits() {
        let Some(endpoint) = fence_testkit::dynamodb::shared_endpoint() else {
            return;
        };
        let client = fence_testkit::dynamodb::client(&endpoint);
        let table = fence_testkit::dynamodb::unique_table("rule_copy");
        let dynamodb = crate::DynamoDb::new(client.clone(), table.as_str(), "rule").unwrap();
        dynamodb.create_table().await.unwrap();
        let domain = Domain::new("rule").unwrap();
        let key = HashMap::from([("pk".to_owned(), AttributeValue::S("rule/x".into()))]);
        let mut disagreements = Vec::new();
        // `None`: no mark yet (`attribute_not_exists`).
        let marks = std::iter::once(None).chain(TOKENS.map(Some));
        for mark in marks {
            for token in TOKENS {
                for policy in [EqualTokenPolicy::SameOwner, EqualTokenPolicy::Strict] {
                    let mut item =
                        HashMap::from([("pk".to_owned(), AttributeValue::S("rule/x".into()))]);
                    if let Some(mark) = mark {
                        item.insert(attr::MARK.to_owned(), number(mark));
                    }
                    client
                        .put_item()
                        .table_name(&table)
                        .set_item(Some(item))
                        .send()
                        .await
                        .unwrap();
                    let mut expr = Expr::default();
                    let condition = expr.admits(FencingToken::new(token).unwrap(), policy);
                    let update = format!("SET {} = :token", expr.name(attr::MARK));
                    let sent = client
                        .update_item()
                        .table_name(&table)
                        .set_key(Some(key.clone()))
                        .condition_expression(condition)
                        .update_expression(update)
                        .set_expression_attribute_names(expr.names())
                        .set_expression_attribute_values(expr.values())
                        .send()
                        .await;
                    let admitted = match sent {
                        Ok(_) => true,
                        Err(error) if format!("{error:?}").contains("ConditionalCheckFailed") => {
                            false
                        }
                        Err(error) => panic!("mark {mark:?}, token {token}: {error:?}"),
                    };
                    let expected = rule::check_token(
                        &domain,
                        mark.map(|mark| FencingToken::new(mark).unwrap()),
                        FencingToken::new(token).unwrap(),
                        policy,
                    )
                    .is_ok();
                    if admitted != expected {
                        disagreements.push(format!(
                            "mark {mark:?} token {token} {policy:?}: {admitted}"
                        ));
                    }
                }
            }
        }
        client
            .delete_table()
            .table_name(&table)
            .send()
            .await
            .unwrap();
        assert!(disagreements.is_empty(), "{disagreements:#?}");
    }
}
