//! What an adapter checked of its access to a resource: each permission it needs, by the name
//! the resource's access control uses (`s3:PutObject`, the Redis command `EVALSHA`, Kafka's
//! `Write` on `TransactionalId`, PostgreSQL's `UPDATE` on a table), and whether it has it.
//!
//! ```
//! use fence_core::permissions::{Access, Permission, PermissionReport, PROBE_SEGMENT};
//! assert_ne!(fence_core::Domain::new(PROBE_SEGMENT)?.escaped(), PROBE_SEGMENT);
//! let mut report = PermissionReport::new("s3", "bucket reports, prefix fenced/");
//! report.push(Permission::granted("s3:PutObject", "every write"));
//! report.push(Permission::denied("s3:GetObject", "every read and write", "403 AccessDenied"));
//! assert!(!report.all_granted());
//! assert!(matches!(report.access("s3:GetObject"), Some(Access::Denied(_))));
//! let missing: Vec<&str> = report.denied().map(|p| p.name.as_str()).collect();
//! assert_eq!(missing, ["s3:GetObject"]);
//! assert_eq!(
//!     report.to_string(),
//!     "s3 (bucket reports, prefix fenced/)\n  granted  s3:PutObject  (every write)\n  DENIED   s3:GetObject  (every read and write): 403 AccessDenied\n"
//! );
//! # Ok::<(), fence_core::FenceError>(())
//! ```

use std::fmt;

use crate::{BackendErrorKind, FenceError};

/// The name segment permission probes use where a domain's escaped name would go: no domain
/// can have it (the escape, [`crate::Domain::escaped`], writes only `[A-Za-z0-9._-]` and
/// `%XX`, never `!`), so a probe touches no domain's state, while staying under the prefix the
/// credentials are granted.
pub const PROBE_SEGMENT: &str = "!permission-probe";

/// Whether the resource granted a permission.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// Used successfully.
    Granted,
    /// Refused by the resource's access control; what it answered.
    Denied(String),
    /// Could not be told: the check failed for another reason (what it was), or the check
    /// needs an earlier permission that was denied.
    Unknown(String),
}

impl Access {
    /// What the outcome of a request says of the permission it needed: a request the
    /// resource decided (applied, or refused by the fence's own rule: stale, too far, not
    /// issued, another revision, a lagging replica) was allowed; a refusal of access control is
    /// denied; any other failure tells nothing.
    pub fn of<T>(outcome: &Result<T, FenceError>) -> Access {
        match outcome {
            Ok(_)
            | Err(
                FenceError::Fenced { .. }
                | FenceError::RevisionMismatch { .. }
                | FenceError::Unissued { .. }
                | FenceError::TokenTooFar { .. }
                | FenceError::Unreplicated { .. },
            ) => Access::Granted,
            Err(
                error @ FenceError::Backend {
                    kind: BackendErrorKind::PermissionDenied,
                    ..
                },
            ) => Access::Denied(error.to_string()),
            Err(error) => Access::Unknown(error.to_string()),
        }
    }
}

/// Who needs a permission: every process that uses the fence, or only operators (retiring a
/// domain, re-bases, settings), whose credentials a worker's should not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// Workers and operators.
    Worker,
    /// Operators only: a worker's credentials are expected to be refused it.
    Operator,
}

/// One permission an adapter needs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Permission {
    /// The name the resource's access control uses.
    pub name: String,
    /// What the fence needs it for.
    pub needed_for: String,
    /// Whether it was granted.
    pub access: Access,
    /// Who needs it.
    pub role: Role,
}

impl Permission {
    /// A granted permission.
    pub fn granted(name: impl Into<String>, needed_for: impl Into<String>) -> Self {
        Permission::new(name, needed_for, Access::Granted)
    }

    /// A denied permission, with the resource's answer.
    pub fn denied(
        name: impl Into<String>,
        needed_for: impl Into<String>,
        answer: impl Into<String>,
    ) -> Self {
        Permission::new(name, needed_for, Access::Denied(answer.into()))
    }

    /// A permission that could not be checked, and why.
    pub fn unknown(
        name: impl Into<String>,
        needed_for: impl Into<String>,
        why: impl Into<String>,
    ) -> Self {
        Permission::new(name, needed_for, Access::Unknown(why.into()))
    }

    /// A permission every process of the fence needs, and its access.
    pub fn new(name: impl Into<String>, needed_for: impl Into<String>, access: Access) -> Self {
        Permission {
            name: name.into(),
            needed_for: needed_for.into(),
            access,
            role: Role::Worker,
        }
    }

    /// The same permission, needed by operators only.
    pub fn for_operators(mut self) -> Self {
        self.role = Role::Operator;
        self
    }
}

/// Every permission an adapter checked, in the order it checked them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermissionReport {
    /// The backend (`redis`, `s3`, …).
    pub backend: &'static str,
    /// Where: the bucket and prefix, the key prefix, the schema, the topics.
    pub scope: String,
    /// The permissions.
    pub permissions: Vec<Permission>,
}

impl PermissionReport {
    /// An empty report for `backend` on `scope`.
    pub fn new(backend: &'static str, scope: impl Into<String>) -> Self {
        PermissionReport {
            backend,
            scope: scope.into(),
            permissions: Vec::new(),
        }
    }

    /// Adds a permission.
    pub fn push(&mut self, permission: Permission) {
        self.permissions.push(permission);
    }

    /// The denied permissions.
    pub fn denied(&self) -> impl Iterator<Item = &Permission> {
        self.permissions
            .iter()
            .filter(|p| matches!(p.access, Access::Denied(_)))
    }

    /// The access of the first permission whose name starts with `name` (`"s3:GetObject"`).
    pub fn access(&self, name: &str) -> Option<&Access> {
        self.permissions
            .iter()
            .find(|p| p.name.starts_with(name))
            .map(|p| &p.access)
    }

    /// The names of the permissions whose role is `role`, in order: with [`Role::Operator`],
    /// what only operators need (retirement, re-bases), which a worker's credentials may lack.
    ///
    /// ```
    /// use fence_core::permissions::{Permission, PermissionReport, Role};
    /// let mut report = PermissionReport::new("redis", "keys `billing:*`");
    /// report.push(Permission::granted("EVALSHA", "every fenced operation"));
    /// report.push(Permission::denied("SCAN", "retire", "NOPERM").for_operators());
    /// assert_eq!(report.names_for(Role::Operator).collect::<Vec<_>>(), ["SCAN"]);
    /// ```
    pub fn names_for(&self, role: Role) -> impl Iterator<Item = &str> {
        self.permissions
            .iter()
            .filter(move |p| p.role == role)
            .map(|p| p.name.as_str())
    }

    /// True when every permission was granted (none denied, none unknown), operators' too.
    pub fn all_granted(&self) -> bool {
        self.permissions.iter().all(|p| p.access == Access::Granted)
    }

    /// True when every permission `role` needs was granted: a worker's credentials pass
    /// without the operators' permissions; an operator's need them all.
    ///
    /// ```
    /// use fence_core::permissions::{Permission, PermissionReport, Role};
    /// let mut report = PermissionReport::new("redis", "keys `billing:*`");
    /// report.push(Permission::granted("EVALSHA", "every fenced operation"));
    /// report.push(Permission::denied("SCAN", "retire", "NOPERM").for_operators());
    /// assert!(report.granted_for(Role::Worker));
    /// assert!(!report.granted_for(Role::Operator));
    /// ```
    pub fn granted_for(&self, role: Role) -> bool {
        self.permissions
            .iter()
            .filter(|p| role == Role::Operator || p.role == Role::Worker)
            .all(|p| p.access == Access::Granted)
    }
}

impl fmt::Display for PermissionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} ({})", self.backend, self.scope)?;
        for p in &self.permissions {
            let who = match p.role {
                Role::Operator => " [operators]",
                Role::Worker => "",
            };
            match &p.access {
                Access::Granted => writeln!(f, "  granted  {}{who}  ({})", p.name, p.needed_for)?,
                Access::Denied(answer) => {
                    writeln!(
                        f,
                        "  DENIED   {}{who}  ({}): {answer}",
                        p.name, p.needed_for
                    )?;
                }
                Access::Unknown(why) => {
                    writeln!(f, "  unknown  {}{who}  ({}): {why}", p.name, p.needed_for)?;
                }
            }
        }
        Ok(())
    }
}
