//! Retiring a domain on DynamoDB: its item (mark, entry, value, remembered operations, counter)
//! deleted in one conditional `DeleteItem` that refuses while the item records a lease.

use async_trait::async_trait;
use fence_core::{Domain, FenceError, Operation, Retired, Retirer};

use crate::error::{classify, Failure};
use crate::expr::Expr;
use crate::item::attr;
use crate::DynamoDbFence;

#[async_trait]
impl Retirer for DynamoDbFence {
    /// Deletes the domain's item unless a lease is recorded on it (`LeaseHeld`, nothing
    /// removed): DynamoDB has no clock to tell an expired lease from a live one, so release the
    /// lease first (or acquire it once it expired, and release it). Its tokens start again
    /// from 1 afterwards: retire only a domain that is never used again.
    async fn retire(&self, domain: &Domain) -> Result<Retired, FenceError> {
        self.cache.remove(domain);
        let dynamodb = self.dynamodb();
        let mut expr = Expr::default();
        let condition = format!("attribute_not_exists({})", expr.name(attr::OWNER));
        let deleted = dynamodb
            .client()
            .delete_item()
            .table_name(dynamodb.table())
            .set_key(Some(dynamodb.key(domain)))
            .condition_expression(condition)
            .set_expression_attribute_names(expr.names())
            .return_values(aws_sdk_dynamodb::types::ReturnValue::AllOld)
            .send()
            .await;
        match deleted {
            Ok(output) => Ok(Retired::new(usize::from(output.attributes.is_some()))),
            Err(error) => match classify(error, dynamodb.table()) {
                Failure::Condition(_) => Err(FenceError::LeaseHeld {
                    domain: domain.clone(),
                }),
                other => Err(other.into_fence_error(domain, Operation::Retire, true)),
            },
        }
    }
}
