//! Which of the IAM actions the fence needs its credentials have: each one used for real on
//! a probe item no domain can have (`<namespace>/!permission-probe`).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use fence_core::permissions::{Access, Permission, PermissionReport, PROBE_SEGMENT};
use fence_core::{Domain, FenceError, Operation};

use crate::error::{classify, Failure};
use crate::item::{attr, text};
use crate::{DynamoDb, BACKEND};

/// The attribute the probes write (no attribute of Fence's item layout).
const PROBE_ATTRIBUTE: &str = "probe";

impl DynamoDb {
    /// Uses each IAM action Fence needs on its table on a probe item (`<namespace>/` then a
    /// segment no escaped domain has, deleted at the end) and reports which the table's
    /// policy refused: `dynamodb:GetItem` (every read, and a write's first read of a domain),
    /// `dynamodb:UpdateItem` (every write, claim, lease and token), `dynamodb:UpdateItem`
    /// inside `TransactWriteItems` (fenced transactions; IAM has no action of its own for a
    /// transaction, but a policy can refuse an action by its `dynamodb:EnclosingOperation`),
    /// and `dynamodb:DeleteItem` (retirement and `fence qualify`'s clean-up: operators').
    /// Your transactions' own actions need their permissions on your tables, not probed here.
    pub async fn check_permissions(&self) -> Result<PermissionReport, FenceError> {
        let table = self.table();
        let mut report = PermissionReport::new(
            BACKEND,
            format!("table {table}, namespace `{}`", self.namespace()),
        );
        let domain = Domain::new(PROBE_SEGMENT)?;
        let key = HashMap::from([(
            attr::PK.to_owned(),
            text(format!("{}/{PROBE_SEGMENT}", self.namespace())),
        )]);
        let access = |outcome: Result<(), Failure>, operation: Operation| {
            Access::of(
                &outcome.map_err(|failure| failure.into_fence_error(&domain, operation, false)),
            )
        };
        let client = self.client();
        let got = client
            .get_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(e, table));
        report.push(Permission::new(
            format!("dynamodb:GetItem on table {table}"),
            "every read, and a write's first read of a domain",
            access(got, Operation::Read),
        ));

        let probe = AttributeValue::S("permission probe".into());
        let names = HashMap::from([("#p".to_owned(), PROBE_ATTRIBUTE.to_owned())]);
        let values = HashMap::from([(":p".to_owned(), probe)]);
        let updated = client
            .update_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .update_expression("SET #p = :p")
            .set_expression_attribute_names(Some(names.clone()))
            .set_expression_attribute_values(Some(values.clone()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(e, table));
        report.push(Permission::new(
            format!("dynamodb:UpdateItem on table {table}"),
            "every write, claim, lease and token",
            access(updated, Operation::Write),
        ));

        let transacted = match Update::builder()
            .table_name(table)
            .set_key(Some(key.clone()))
            .update_expression("SET #p = :p")
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .build()
        {
            Ok(update) => client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().update(update).build())
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify(e, table)),
            Err(error) => Err(Failure::Fence(crate::error::backend_error(
                None,
                crate::DynamoDbFenceError::Unexpected(error.to_string()),
            ))),
        };
        report.push(Permission::new(
            format!("dynamodb:UpdateItem on table {table} inside TransactWriteItems"),
            "fenced transactions (your actions need their own permissions on your tables)",
            access(transacted, Operation::Write),
        ));

        let deleted = client
            .delete_item()
            .table_name(table)
            .set_key(Some(key))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify(e, table));
        report.push(
            Permission::new(
                format!("dynamodb:DeleteItem on table {table}"),
                "retire, and removing qualify's and this probe's items (denied: the probe item stays)",
                access(deleted, Operation::Delete),
            )
            .for_operators(),
        );
        Ok(report)
    }
}
