//! `RedisFence`: the fenced store on Redis.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fence_core::raw::{pipeline, rule};
use fence_core::{
    Accepted, Capabilities, Claimed, Domain, Entry, EqualTokenPolicy, Fence, FenceError,
    FencedStore, FencingToken, Mutation, OpIdRetention, OpKind, Operation, Snapshot,
    WriteCondition, WriteOutcome, WriteRequest,
};
use redis::Value;
use tokio::sync::OnceCell;

use crate::connection::{Connection, Connector, Waited};
use crate::envelope::{Answer, Envelope};
use crate::error::{self, map_error, unexpected, RedisFenceError, BACKEND};
use crate::keys::Keys;
use crate::reply::{parse_revision, Reply};
use crate::scripts::{LuaScript, CLAIM, READ, WRITE};

/// Shared state of a fence and the leases and issuers made from it.
pub(crate) struct Inner {
    pub(crate) description: String,
    pub(crate) connection: OnceCell<Connection>,
    pub(crate) connector: Option<Connector>,
    pub(crate) keys: Keys,
    pub(crate) max_value_bytes: usize,
    pub(crate) op_id_window: Duration,
    pub(crate) wait: Option<(u32, Duration)>,
    pub(crate) durable: bool,
    pub(crate) max_token_step: Option<NonZeroU64>,
    pub(crate) issued_only: bool,
}

/// A fenced store on standalone Redis or Redis Cluster: every operation is one Lua script that
/// checks the token against the domain's high-water mark and mutates in the same atomic step.
///
/// Cheap to clone; clones share one multiplexed connection.
///
/// ```no_run
/// use std::time::Duration;
/// use fence_core::{Domain, Fence, FencedStore, LeaseManager, OwnerId, WriteRequest};
/// use fence_redis::RedisFence;
/// # async fn run() -> Result<(), fence_core::FenceError> {
/// let fence = RedisFence::builder()
///     .url("redis://127.0.0.1:6379")
///     .connection_timeout(Duration::from_secs(3))
///     .connect()
///     .await?;
/// let domain = Domain::new("invoices/2026-11")?;
/// // The same Redis issues the token (its lease) and enforces it (the domain's mark).
/// let lease = fence.leases().acquire(&domain, &OwnerId::new("worker-1")?, Duration::from_secs(10)).await?;
/// fence.claim(&domain, lease.token).await?;
/// fence.write(&WriteRequest::put(domain.clone(), lease.token, "total=1200")).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisFence {
    pub(crate) inner: Arc<Inner>,
}

impl RedisFence {
    pub(crate) fn from_inner(inner: Inner) -> Self {
        RedisFence {
            inner: Arc::new(inner),
        }
    }

    pub(crate) async fn connection(
        &self,
        domain: Option<&Domain>,
    ) -> Result<Connection, FenceError> {
        let inner = &self.inner;
        inner
            .connection
            .get_or_try_init(|| async {
                let backend_error = |e| map_error(e, domain, Operation::Read, false);
                match &inner.connector {
                    Some(connector) => connector.connect().await.map_err(backend_error),
                    None => Err(error::backend_error(
                        domain,
                        RedisFenceError::UnexpectedReply {
                            script: "connect",
                            detail: "no connection configured".into(),
                        },
                    )),
                }
            })
            .await
            .cloned()
    }

    /// The key prefix every key of this fence starts with.
    pub fn prefix(&self) -> &str {
        self.inner.keys.prefix()
    }

    /// How long an operation id is remembered after its operation.
    pub fn op_id_window(&self) -> Duration {
        self.inner.op_id_window
    }

    /// Where this fence connects, with any password redacted.
    pub fn target(&self) -> &str {
        &self.inner.description
    }

    /// Checks that the server answers (used by `connect`).
    pub async fn ping(&self) -> Result<(), FenceError> {
        let connection = self.connection(None).await?;
        connection
            .query(&redis::cmd("PING"))
            .await
            .map(|_| ())
            .map_err(|e| map_error(e, None, Operation::Read, false))
    }

    /// Runs a script for `domain`, mapping transport errors.
    pub(crate) async fn eval(
        &self,
        script: &LuaScript,
        domain: &Domain,
        operation: Operation,
        mutating: bool,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<Reply, FenceError> {
        let (value, _) = self
            .eval_raw(script, domain, operation, mutating, None, keys, args)
            .await?;
        Reply::parse(script.name, domain, value)
    }

    /// Runs `script` (built with [`LuaScript::fenced`]) for `call`, with the body's `keys`
    /// (full key names) and `args`.
    pub(crate) async fn run_fenced(
        &self,
        script: &LuaScript,
        call: &Envelope<'_>,
        keys: impl IntoIterator<Item = String>,
        args: &[&[u8]],
    ) -> Result<(Answer, Waited), FenceError> {
        let domain = call.domain;
        let mut all_keys = vec![
            self.inner.keys.state(domain),
            self.inner.keys.op(domain, call.token, call.op_id),
            self.inner.keys.sequence(domain),
            self.inner.keys.bounds(domain),
        ];
        all_keys.extend(keys);
        let token_text = call.token.to_string();
        let retention = self.retention_ms();
        let strict: &[u8] = if call.policy == EqualTokenPolicy::Strict {
            b"1"
        } else {
            b"0"
        };
        let max_step = self
            .inner
            .max_token_step
            .map_or_else(String::new, |step| step.to_string());
        let mut all_args: Vec<&[u8]> = vec![
            token_text.as_bytes(),
            strict,
            if call.op_id.is_some() { b"1" } else { b"0" },
            retention.as_bytes(),
            call.kind_code(),
            max_step.as_bytes(),
            if self.inner.issued_only { b"1" } else { b"0" },
            if self.inner.wait.is_some() {
                b"1"
            } else {
                b"0"
            },
        ];
        all_args.extend_from_slice(args);
        let (reply, waited) = self
            .eval_fenced(script, domain, call.operation, &all_keys, &all_args)
            .await?;
        Ok((call.answer(reply)?, waited))
    }

    /// Runs a fenced change for `domain` followed by the configured `WAIT` on the same
    /// connection; check what `WAIT` answered with [`RedisFence::replicas`] once the reply says
    /// the change was applied (or replayed).
    pub(crate) async fn eval_fenced(
        &self,
        script: &LuaScript,
        domain: &Domain,
        operation: Operation,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<(Reply, Waited), FenceError> {
        let (value, waited) = self
            .eval_raw(script, domain, operation, true, self.inner.wait, keys, args)
            .await?;
        Ok((Reply::parse(script.name, domain, value)?, waited))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn eval_raw(
        &self,
        script: &LuaScript,
        domain: &Domain,
        operation: Operation,
        mutating: bool,
        wait: Option<(u32, Duration)>,
        keys: &[String],
        args: &[&[u8]],
    ) -> Result<(Value, Waited), FenceError> {
        let connection = self.connection(Some(domain)).await?;
        connection
            .eval(script, keys, args, wait)
            .await
            .map_err(|e| error::map_script_error(e, script, Some(domain), operation, mutating))
    }

    /// The replicas that acknowledged an applied (or replayed) change, or
    /// [`FenceError::Unreplicated`] when fewer than asked did in time. A failed `WAIT` counts
    /// none: the change is applied on the primary either way.
    pub(crate) fn replicas(
        &self,
        domain: &Domain,
        operation: Operation,
        waited: Waited,
    ) -> Result<Option<u32>, FenceError> {
        let (Some((requested, _)), Some(waited)) = (self.inner.wait, waited) else {
            return Ok(None);
        };
        let acknowledged = waited.unwrap_or_else(|error| {
            tracing::warn!(domain = domain.as_str(), %error, "WAIT failed after a fenced change");
            0
        });
        rule::check_replicas(domain, operation, requested, acknowledged).map(Some)
    }

    pub(crate) fn retention_ms(&self) -> String {
        self.inner.op_id_window.as_millis().max(1).to_string()
    }

    async fn write_now(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        let domain = request.domain();
        let operation = request.operation();
        pipeline::validate_write(request, Some(self.inner.max_value_bytes))?;
        let (mutation, value): (&[u8], &[u8]) = match request.mutation() {
            Mutation::Put(value) => (b"put", value),
            Mutation::Delete => (b"del", b""),
            _ => return Err(FenceError::unsupported(BACKEND, "this mutation")),
        };
        let (condition, expected) = match request.condition() {
            WriteCondition::Any => ("any", String::new()),
            WriteCondition::Absent => ("absent", String::new()),
            WriteCondition::Revision(revision) => ("rev", revision.to_string()),
            _ => return Err(FenceError::unsupported(BACKEND, "this write condition")),
        };
        let token = request.token();
        let call = Envelope {
            domain,
            token,
            policy: request.policy(),
            op_id: request.op_id(),
            kind: OpKind::Write,
            operation,
        };
        let args = [condition.as_bytes(), expected.as_bytes(), mutation, value];
        // The body writes the entry fields: the state key is its KEYS[1] too.
        let state = [self.inner.keys.state(domain)];
        let (answer, waited) = self.run_fenced(&WRITE, &call, state, &args).await?;
        let revision_of = |outcome: &str| {
            parse_revision(domain, outcome)?.ok_or_else(|| {
                FenceError::corrupt(BACKEND, domain, "operation id record has no revision")
            })
        };
        let outcome = match answer {
            Answer::Applied {
                previous, outcome, ..
            } => WriteOutcome::Accepted(Accepted::new(token, revision_of(&outcome)?, previous)),
            Answer::Replayed { previous, outcome } => {
                WriteOutcome::Duplicate(Accepted::new(token, revision_of(&outcome)?, previous))
            }
            Answer::Refused(reply) if reply.tag == "mismatch" => {
                return Err(FenceError::RevisionMismatch {
                    domain: domain.clone(),
                    expected: request.condition(),
                    actual: reply.revision(0)?,
                })
            }
            Answer::Refused(reply) => return Err(reply.into_error()),
        };
        match self.replicas(domain, operation, waited)? {
            Some(replicas) => Ok(match outcome {
                WriteOutcome::Accepted(a) => {
                    WriteOutcome::Accepted(a.with_replicas_acknowledged(replicas))
                }
                WriteOutcome::Duplicate(a) => {
                    WriteOutcome::Duplicate(a.with_replicas_acknowledged(replicas))
                }
                other => other,
            }),
            None => Ok(outcome),
        }
    }

    async fn claim_now(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        let call = Envelope {
            domain,
            token,
            policy: EqualTokenPolicy::SameOwner,
            op_id: None,
            kind: OpKind::Write,
            operation: Operation::Claim,
        };
        let (answer, waited) = self.run_fenced(&CLAIM, &call, [], &[]).await?;
        match answer {
            Answer::Applied { previous, .. } => {
                self.replicas(domain, Operation::Claim, waited)?;
                Ok(Claimed::new(token, previous))
            }
            Answer::Replayed { .. } => Err(unexpected("claim", domain, "a claim replayed")),
            Answer::Refused(reply) => Err(reply.into_error()),
        }
    }

    async fn read_now(&self, domain: &Domain, with_value: bool) -> Result<Snapshot, FenceError> {
        let keys = [self.inner.keys.state(domain)];
        let flag: &[u8] = if with_value { b"1" } else { b"0" };
        let reply = self
            .eval(&READ, domain, Operation::Read, false, &keys, &[flag])
            .await?;
        if reply.tag != "ok" {
            return Err(reply.into_error());
        }
        let hwm = reply.token(0)?;
        let state = reply.text(1)?;
        let entry = if state.is_empty() {
            Entry::Absent
        } else {
            let token = reply.token(2)?.ok_or_else(|| {
                FenceError::corrupt(BACKEND, domain, "entry without a writer token")
            })?;
            let revision = reply
                .revision(3)?
                .ok_or_else(|| FenceError::corrupt(BACKEND, domain, "entry without a revision"))?;
            match state.as_str() {
                "v" => Entry::Value {
                    value: reply.bytes(4)?.into(),
                    token,
                    revision,
                },
                _ => Entry::Tombstone { token, revision },
            }
        };
        Ok(Snapshot::new(hwm, entry))
    }
}

impl fmt::Debug for RedisFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFence")
            .field("target", &self.inner.description)
            .field("keys", &self.inner.keys)
            .field("max_value_bytes", &self.inner.max_value_bytes)
            .field("wait", &self.inner.wait)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Fence for RedisFence {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::store()
            .with_op_id_retention(OpIdRetention::Window(self.inner.op_id_window))
            .with_max_value_bytes(Some(self.inner.max_value_bytes))
            .with_survives_restart(self.inner.durable)
            .with_max_token_step(self.inner.max_token_step)
            .with_issued_only(self.inner.issued_only)
    }

    async fn claim(&self, domain: &Domain, token: FencingToken) -> Result<Claimed, FenceError> {
        self.claim_now(domain, token).await
    }

    async fn high_water_mark(&self, domain: &Domain) -> Result<Option<FencingToken>, FenceError> {
        Ok(self.read_now(domain, false).await?.high_water_mark)
    }
}

#[async_trait]
impl FencedStore for RedisFence {
    async fn write(&self, request: &WriteRequest) -> Result<WriteOutcome, FenceError> {
        self.write_now(request).await
    }

    async fn read(&self, domain: &Domain) -> Result<Snapshot, FenceError> {
        self.read_now(domain, true).await
    }
}
