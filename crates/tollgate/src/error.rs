//! The one error type of the crate.

use std::fmt;

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A name, duration, capacity, permit count or URL that tollgate rejects.
    /// The message says what is allowed.
    InvalidInput,
    /// The request names a capacity that differs from the one stored with the
    /// gate. Change it with `set_capacity` instead.
    CapacityConflict,
    /// The gate has no capacity stored and the request named none.
    NoCapacity,
    /// The lease ended (expired, or was never held) before this call.
    LeaseLost,
    /// The store could not be reached or did not answer in time.
    Unavailable,
    /// The store answered with something tollgate did not expect.
    Store,
    /// The job is being run, so it cannot be changed now (rescheduled).
    JobRunning,
    /// On a durable store handle: the change was made on the master, but
    /// fewer replicas than asked confirmed it in time, so a failover now
    /// could lose it.
    NotReplicated,
    /// A sharded job queue's handle names a different number of partitions
    /// than the store has in force for that queue. Every producer and
    /// consumer must use the same number; change it with
    /// `JobQueue::repartition` once the queue is empty.
    PartitionConflict,
    /// The store refused this client's set-up, not one request: a wrong
    /// password or user, a cluster reached through a plain URL, an ACL
    /// that disallows a command tollgate runs, or a server older than
    /// tollgate supports (Redis before 7.0, Valkey before 7.2; the message
    /// names the version found and the one needed). Retrying will not help.
    Misconfigured,
    /// An admin took this ticket out of the line
    /// ([`Gate::remove_waiter`](crate::Gate::remove_waiter)): stop waiting.
    /// Not a lost lease (nothing was held) and not a ticket dropped for
    /// missed heartbeats (which may queue again).
    Removed,
    /// The durable embedded store could not write its log: the disk is
    /// full or failing. Changes are refused (reads go on) until the disk
    /// takes writes again; nothing already answered is lost. An answer
    /// that waited for the disk too long gets this too: its change is
    /// applied, and is written once the disk takes it.
    NotPersisted,
    /// The gate's door is closed to newcomers
    /// ([`Gate::set_door`](crate::Gate::set_door)): nobody new may enter
    /// until it opens again. Holders and the line are not affected.
    Closed,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::CapacityConflict => "capacity conflict",
            ErrorKind::NoCapacity => "no capacity",
            ErrorKind::LeaseLost => "lease lost",
            ErrorKind::Unavailable => "store unavailable",
            ErrorKind::Store => "store error",
            ErrorKind::JobRunning => "job running",
            ErrorKind::NotReplicated => "not replicated",
            ErrorKind::PartitionConflict => "partition conflict",
            ErrorKind::Misconfigured => "store misconfigured",
            ErrorKind::Removed => "removed from the line",
            ErrorKind::NotPersisted => "not persisted",
            ErrorKind::Closed => "gate closed",
        })
    }
}

/// The error of every fallible tollgate call. Inspect it with [`Error::kind`]
/// or the `is_*` predicates; the underlying cause, if any, is its `source()`.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// An `Unavailable` error: for callers that bound store calls with
    /// their own deadline and need to report one that passed.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    pub(crate) fn misconfigured(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Misconfigured, message)
    }

    pub(crate) fn not_persisted(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::NotPersisted, message)
    }

    /// An enter refused by a closed door.
    pub(crate) fn closed() -> Self {
        Error::new(ErrorKind::Closed, "the gate's door is closed to newcomers")
    }

    pub(crate) fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// A push to a queue closed by a repartition.
    pub(crate) fn retired(queue: &str) -> Error {
        Error::new(
            ErrorKind::PartitionConflict,
            format!(
                "queue {queue} belongs to a partition layout that was replaced: use the partition count in force"
            ),
        )
    }

    /// A group's own limits past the most a queue keeps.
    pub(crate) fn too_many_overrides(queue: &str, most: usize) -> Error {
        Error::invalid(format!(
            "queue {queue} keeps its own limits for at most {most} groups: drop some (or set the queue's group_concurrency and group_rate for all) first"
        ))
    }

    /// The same failure again, for each of several callers it reaches
    /// (the source's text goes into the message).
    pub(crate) fn duplicate(&self) -> Error {
        let message = match &self.source {
            Some(source) => format!("{} ({source})", self.message),
            None => self.message.clone(),
        };
        Error::new(self.kind, message)
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The caller passed something tollgate rejects; retrying will not help.
    pub fn is_invalid_input(&self) -> bool {
        self.kind == ErrorKind::InvalidInput
    }

    /// The store was unreachable; retrying later may help.
    pub fn is_unavailable(&self) -> bool {
        self.kind == ErrorKind::Unavailable
    }

    /// The lease had already ended.
    pub fn is_lease_lost(&self) -> bool {
        self.kind == ErrorKind::LeaseLost
    }

    /// An admin removed the ticket from the line: the waiter should stop,
    /// not queue again.
    pub fn is_removed(&self) -> bool {
        self.kind == ErrorKind::Removed
    }

    /// The gate's door is closed: nobody new may enter for now.
    pub fn is_closed(&self) -> bool {
        self.kind == ErrorKind::Closed
    }

    /// The requested capacity conflicts with the gate's stored one.
    pub fn is_conflict(&self) -> bool {
        self.kind == ErrorKind::CapacityConflict
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        if let Some(source) = &self.source {
            write!(f, " ({source})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        use redis::{ErrorKind as K, ServerErrorKind as S};
        // A cluster still moving a slot or promoting a replica, a server
        // still loading its data or a demoted master: passing states, like
        // an unreachable server.
        let passing = e.is_cluster_error()
            || matches!(
                e.kind(),
                K::Server(S::MasterDown | S::ReadOnly | S::BusyLoading | S::TryAgain | S::ClusterDown)
            );
        // A push to a partition of a replaced layout (jobs.lua).
        if e.code() == Some("RETIRED") {
            let detail = e.detail().unwrap_or("this queue was repartitioned").to_owned();
            return Error::new(ErrorKind::PartitionConflict, detail);
        }
        // Credentials or permissions the server refuses: no retry helps.
        let refused = matches!(e.kind(), K::AuthenticationFailed | K::Server(S::NoPerm))
            || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"));
        if refused {
            return Error::new(
                ErrorKind::Misconfigured,
                "redis refused this client: check the user and password in the URL, and the user's ACL",
            )
            .with_source(e);
        }
        // A database the server does not have (`redis://host:6379/99`):
        // the URL is wrong, and no retry mends it.
        if e.to_string().contains("DB index is out of range") {
            return Error::new(
                ErrorKind::Misconfigured,
                "redis has no database with the index the URL names (its last /N): \
                 use 0 up to one less than the server's `databases` setting (16 by default)",
            )
            .with_source(e);
        }
        let kind = if e.is_io_error()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_connection_dropped()
            || e.is_unrecoverable_error()
            || passing
        {
            ErrorKind::Unavailable
        } else {
            ErrorKind::Store
        };
        let message = match kind {
            ErrorKind::Unavailable => "redis is unreachable",
            _ => "redis returned an error",
        };
        Error::new(kind, message).with_source(e)
    }
}

/// `Result` with tollgate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// tollgate's one error body over HTTP, as JSON text:
/// `{"error":{"code":"…","message":"…"}}`. The rate-limit layer answers
/// with it, and a server can use it for every error it renders, so that
/// all of them read the same.
///
/// ```
/// assert_eq!(
///     tollgate::error_body("rate_limited", "slow \"down\""),
///     r#"{"error":{"code":"rate_limited","message":"slow \"down\""}}"#
/// );
/// ```
pub fn error_body(code: &str, message: &str) -> String {
    serde_json::json!({"error": {"code": code, "message": message}}).to_string()
}

/// [`error_body`] as an HTTP answer with `status` (the layers' refusals).
pub(crate) fn error_response<B: From<String>>(
    status: http::StatusCode,
    code: &str,
    message: &str,
) -> http::Response<B> {
    let mut response = http::Response::new(B::from(error_body(code, message)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}
