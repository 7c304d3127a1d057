//! Condition and update expressions: the attribute names and values one request uses (DynamoDB
//! refuses names or values a request's expressions do not use), and the acceptance rule as
//! DynamoDB evaluates it.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use fence_core::{EqualTokenPolicy, FencingToken};

use crate::item::{attr, number};

/// The names and values of one request's expressions.
#[derive(Debug, Default)]
pub(crate) struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Expr {
    /// `#attribute`, registered.
    pub(crate) fn name(&mut self, attribute: &str) -> String {
        let placeholder = format!("#{attribute}");
        self.names.insert(placeholder.clone(), attribute.to_owned());
        placeholder
    }

    /// `:key`, bound to `value`.
    pub(crate) fn value(&mut self, key: &str, value: AttributeValue) -> String {
        let placeholder = format!(":{key}");
        self.values.insert(placeholder.clone(), value);
        placeholder
    }

    /// The names, `None` when there are none (DynamoDB refuses an empty map).
    pub(crate) fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }

    /// The values, `None` when there are none.
    pub(crate) fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }

    /// The acceptance rule on the item's mark, as DynamoDB evaluates it in the same request
    /// as the change: no mark yet, or the mark at most the token (below it under
    /// [`EqualTokenPolicy::Strict`]). DynamoDB compares numbers exactly (38 digits).
    pub(crate) fn admits(&mut self, token: FencingToken, policy: EqualTokenPolicy) -> String {
        let mark = self.name(attr::MARK);
        let token = self.value("token", number(token.get()));
        let comparison = match policy {
            EqualTokenPolicy::Strict => "<",
            _ => "<=",
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
