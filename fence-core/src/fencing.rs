//! What every fenced request presents, whatever it does: [`Fencing`], and the methods a request
//! type that carries one gets from [`fenced_request!`](crate::fenced_request).

use crate::{Domain, FencingToken, OperationId};

/// What a resource does with a token equal to the domain's high-water mark.
///
/// Always chosen explicitly by the request; [`EqualTokenPolicy::SameOwner`] is the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EqualTokenPolicy {
    /// Accept `token == high-water mark`: the current owner writes many times during its lease.
    #[default]
    SameOwner,
    /// Reject `token == high-water mark` as a replay: every write carries a fresh token.
    Strict,
}

/// The domain a fenced request acts on, the token it carries, its operation id (if any) and
/// its equal-token policy: the part of a write, an append, a PostgreSQL transaction or a Redis
/// script call that the acceptance rule reads.
///
/// ```
/// use fence_core::{Domain, EqualTokenPolicy, Fencing, FencingToken, OperationId};
/// let fencing = Fencing::new(Domain::new("orders")?, FencingToken::new(7)?)
///     .with_op_id(OperationId::new("order-1")?)
///     .with_policy(EqualTokenPolicy::Strict);
/// assert_eq!(fencing.token().get(), 7);
/// assert_eq!(fencing.op_id().map(|id| id.as_str()), Some("order-1"));
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fencing {
    domain: Domain,
    token: FencingToken,
    op_id: Option<OperationId>,
    policy: EqualTokenPolicy,
}

impl Fencing {
    /// `token` on `domain`, no operation id, the same-owner policy.
    pub fn new(domain: Domain, token: FencingToken) -> Self {
        Fencing {
            domain,
            token,
            op_id: None,
            policy: EqualTokenPolicy::SameOwner,
        }
    }

    /// Sets the operation id: while the resource remembers it, a retry with the same token and
    /// op id is answered as a duplicate and applies nothing again.
    pub fn with_op_id(mut self, op_id: OperationId) -> Self {
        self.op_id = Some(op_id);
        self
    }

    /// Sets the equal-token policy.
    pub fn with_policy(mut self, policy: EqualTokenPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The fencing token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The operation id, if any.
    pub fn op_id(&self) -> Option<&OperationId> {
        self.op_id.as_ref()
    }

    /// The equal-token policy.
    pub fn policy(&self) -> EqualTokenPolicy {
        self.policy
    }
}

/// Gives a request type with a field `fencing: Fencing` the methods every fenced request has:
/// `with_op_id` and `with_policy` (builders), `domain`, `token`, `op_id`, `policy` and
/// `fencing`. For adapter authors: one definition of them for every request type. An optional
/// `op_id_doc = "…"` adds a line to `with_op_id`'s docs (what a duplicate reports). The type
/// must have no generic or lifetime parameters.
///
/// ```
/// use fence_core::{fenced_request, Domain, Fencing, FencingToken};
/// /// A request of an extension.
/// pub struct Stamp {
///     fencing: Fencing,
///     label: String,
/// }
/// fenced_request!(Stamp);
/// let stamp = Stamp { fencing: Fencing::new(Domain::new("orders")?, FencingToken::new(3)?), label: "x".into() };
/// assert_eq!(stamp.token().get(), 3);
/// # let _ = stamp.label;
/// # Ok::<(), fence_core::InvalidInput>(())
/// ```
#[macro_export]
macro_rules! fenced_request {
    ($request:ty $(, op_id_doc = $op_id_doc:literal)?) => {
        impl $request {
            /// Sets the operation id: while the resource remembers it, a retry with the same
            /// token and op id is answered as a duplicate and applies nothing again.
            $(#[doc = ""] #[doc = $op_id_doc])?
            pub fn with_op_id(mut self, op_id: $crate::OperationId) -> Self {
                self.fencing = self.fencing.with_op_id(op_id);
                self
            }

            /// Sets the equal-token policy (same owner by default: a lease holder makes many
            /// requests under one token).
            pub fn with_policy(mut self, policy: $crate::EqualTokenPolicy) -> Self {
                self.fencing = self.fencing.with_policy(policy);
                self
            }

            /// The domain.
            pub fn domain(&self) -> &$crate::Domain {
                self.fencing.domain()
            }

            /// The fencing token.
            pub fn token(&self) -> $crate::FencingToken {
                self.fencing.token()
            }

            /// The operation id, if any.
            pub fn op_id(&self) -> ::core::option::Option<&$crate::OperationId> {
                self.fencing.op_id()
            }

            /// The equal-token policy.
            pub fn policy(&self) -> $crate::EqualTokenPolicy {
                self.fencing.policy()
            }

            /// The domain, token, operation id and policy together.
            pub fn fencing(&self) -> &$crate::Fencing {
                &self.fencing
            }
        }
    };
}
