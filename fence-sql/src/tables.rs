//! The names of the fence's tables in the namespace its migration created them in.

use std::marker::PhantomData;

use fence_core::raw::sql_identifier;
use fence_core::InvalidInput;

use crate::Dialect;

/// The fence's tables in one namespace (a PostgreSQL schema, a MySQL database), its name
/// validated once (`[a-z_][a-z0-9_]*`, at most 63 bytes), so every statement can splice them
/// into its SQL.
#[derive(Debug)]
pub struct Tables<D> {
    namespace: String,
    dialect: PhantomData<fn() -> D>,
}

impl<D: Dialect> Tables<D> {
    /// The tables in `namespace`, refused unless it is a plain identifier.
    pub fn new(namespace: &str) -> Result<Self, InvalidInput> {
        Ok(Tables {
            namespace: sql_identifier(D::NAMESPACE, namespace)?,
            dialect: PhantomData,
        })
    }
}

impl<D> Tables<D> {
    /// The namespace.
    pub fn name(&self) -> &str {
        &self.namespace
    }

    /// `<namespace>.<table>`.
    pub fn table(&self, table: &str) -> String {
        format!("{}.{table}", self.namespace)
    }

    /// The marks (one row per domain).
    pub fn marks(&self) -> String {
        self.table("fence_marks")
    }

    /// The remembered operation ids.
    pub fn ops(&self) -> String {
        self.table("fence_ops")
    }

    /// The issuer's counters.
    pub fn counters(&self) -> String {
        self.table("fence_counters")
    }

    /// The leases.
    pub fn leases(&self) -> String {
        self.table("fence_leases")
    }

    /// The admission settings kept for every client.
    pub fn settings(&self) -> String {
        self.table("fence_settings")
    }

    /// The operators' re-bases.
    pub fn rebases(&self) -> String {
        self.table("fence_rebases")
    }
}

impl<D> Clone for Tables<D> {
    fn clone(&self) -> Self {
        Tables {
            namespace: self.namespace.clone(),
            dialect: PhantomData,
        }
    }
}
