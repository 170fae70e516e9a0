//! Exit codes, documented in the README. sysexits(3) numbering where one fits.

/// `limit check`: the request was refused; `room verify-draw`: the draw
/// or the receipt does not check.
pub(crate) const REFUSED: i32 = 1;
/// Bad arguments, or no store named.
pub(crate) const USAGE: i32 = 64;
/// No such thing: a job id, a queue that never held anything, or a
/// schedule (sysexits' EX_DATAERR).
pub(crate) const NO_SUCH: i32 = 65;
/// The store could not be reached.
pub(crate) const UNAVAILABLE: i32 = 69;
/// Something tollgate did not expect.
pub(crate) const SOFTWARE: i32 = 70;
/// (`data`, `serve` on the embedded store) A file of the data directory
/// cannot be read or written, or (`elect`) the --token-file cannot
/// (sysexits' EX_IOERR).
pub(crate) const IO: i32 = 74;
/// The lock or permits could not be had within `--wait`; a job to cancel
/// or reschedule is being run.
pub(crate) const BUSY: i32 = 75;
/// The lease (or an election's leadership) was lost, or held for
/// --max-hold, while the command ran; the command got SIGTERM.
pub(crate) const LEASE_LOST: i32 = 76;
/// (`lock run`, `semaphore run`) An admin removed this waiter from the
/// line (`lock remove`): the command was not run (sysexits' EX_NOPERM).
pub(crate) const REMOVED: i32 = 77;
/// The set-up is wrong: Redis refused the credentials, is older than
/// supported (Redis 7.0, Valkey 7.2), a cluster was named by a plain URL,
/// a queue's partition count differs from the stored one,
/// (`serve`) Redis refused the connection's set-up (a DB index it does
/// not have), a room's page template cannot be used, or (`serve`) a
/// secret still holds the example config's `change-me` placeholder, or
/// (`serve`, `data`) the data directory is held by another server or is
/// damaged other than by a torn last write.
pub(crate) const CONFIG: i32 = 78;
/// The command could not be started (not an executable file).
pub(crate) const CANNOT_EXECUTE: i32 = 126;
/// The command was not found. `jobs work` checks both before any claim.
pub(crate) const NOT_FOUND: i32 = 127;

/// Every exit code with what it means, for the manual page's EXIT STATUS
/// (README.md's table says the same at more length; packaging.rs checks
/// both name the same codes). `None` is the run command's own code.
pub(crate) const MEANINGS: &[(Option<i32>, &str)] = &[
    (
        None,
        "lock run, semaphore run, elect: the command's own (128 + N if killed by signal N); it ran under the lease",
    ),
    (Some(0), "done"),
    (
        Some(REFUSED),
        "(limit check) the request was refused; (room verify-draw) the draw or the receipt does not check",
    ),
    (
        Some(USAGE),
        "bad arguments, or no store given (the message says which)",
    ),
    (Some(NO_SUCH), "no such holder, ticket, job, queue or schedule"),
    (
        Some(UNAVAILABLE),
        "the store or server is unreachable; (serve) an address cannot be bound; (health) no answer, or 5xx",
    ),
    (Some(SOFTWARE), "an internal error"),
    (
        Some(IO),
        "(data, serve) a file of the data directory cannot be read or written; (elect) the --token-file cannot",
    ),
    (
        Some(BUSY),
        "the lock or permits could not be had within --wait, a job to cancel or reschedule is being run, the gate's door is closed, (room verify-draw) the draw is not revealed yet, or the server's rate limit refused this client",
    ),
    (
        Some(LEASE_LOST),
        "the lease (an election's leadership) was lost, or held for --max-hold, while the command ran: the command got SIGTERM",
    ),
    (
        Some(REMOVED),
        "(lock run, semaphore run, elect) an admin removed this waiter from the line: the command never ran",
    ),
    (
        Some(CONFIG),
        "the set-up is wrong: credentials, store version, URL, partitions, a room's template, a change-me secret, a server's token or certificate, a data directory another server holds or that is damaged",
    ),
    (
        Some(CANNOT_EXECUTE),
        "the command could not be started (not an executable file)",
    ),
    (Some(NOT_FOUND), "the command was not found"),
];

/// The exit code for a library error.
pub(crate) fn for_error(e: &tollgate::Error) -> i32 {
    use tollgate::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidInput | ErrorKind::CapacityConflict | ErrorKind::NoCapacity => USAGE,
        ErrorKind::JobRunning | ErrorKind::Closed => BUSY,
        ErrorKind::Unavailable | ErrorKind::NotReplicated => UNAVAILABLE,
        ErrorKind::LeaseLost => LEASE_LOST,
        ErrorKind::Removed => REMOVED,
        ErrorKind::Misconfigured | ErrorKind::PartitionConflict => CONFIG,
        ErrorKind::NotPersisted => IO,
        _ => SOFTWARE,
    }
}
