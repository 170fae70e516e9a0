//! Script calls to one server, written together: callers hand their
//! `EVALSHA` to one task, which lets the callers that are ready run first
//! (it goes to the back of the runtime's queue once) and then sends what
//! has come as one pipeline, in one write. Without it, each call was its
//! own `writev` (tokio runs a task woken by the running one next, so the
//! connection's writer ran after every single send): at 50 concurrent
//! callers, 0.8 writes per call and a third of the client's CPU in them
//! (`docs/BENCHMARKS.md`).
//!
//! - A server error answers only its own call (`ignore_errors`); a lost
//!   connection answers every call of the pipeline.
//! - Order: the pipelines queue for the connection in the order the calls
//!   came (each is awaited in a task of its own, which polls it once, so
//!   that it queues, before the next pipeline is made: a turn lock passed
//!   from the batching task to it). A call abandoned by its caller before
//!   its answer (a timeout, a dropped future) keeps every later call in
//!   the task's line until it is sent or dropped, so a call made after it
//!   (an enter's clean-up `leave`) is never sent before it (while the
//!   connection is re-established, calls waiting for it may go in any
//!   order, as without this task).
//! - A call whose caller has gone (timed out, dropped) before it was sent
//!   is not sent.
//! - At most `PIPES` pipelines are under way; the rest wait in the task's
//!   queue (one call per waiting caller).
//! - The hop through the task costs latency, which a chain of hand-offs
//!   (a semaphore's line) pays at every step with little to batch: a call
//!   goes through it only while at least `CROWD` others are under way (or
//!   an abandoned call is pending), and straight to the connection
//!   otherwise.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::task::Poll;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

/// At most this many calls in one pipeline.
const MOST: usize = 128;
/// At most this many pipelines under way.
const PIPES: usize = 64;
/// Calls under way from which a new one is batched.
const CROWD: usize = 8;

/// A call's state: waited for, answered (or dropped), abandoned by its
/// caller.
const WAITED: u8 = 0;
const SETTLED: u8 = 1;
const LEFT: u8 = 2;

struct Call {
    cmd: Cmd,
    reply: oneshot::Sender<RedisResult<Value>>,
    state: Arc<AtomicU8>,
}

impl Call {
    /// Whether the caller abandoned the call (then counted as settled).
    fn abandoned(&self, abandoned: &AtomicUsize) -> bool {
        match self
            .state
            .compare_exchange(WAITED, SETTLED, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => false,
            Err(_) => {
                abandoned.fetch_sub(1, Ordering::SeqCst);
                true
            }
        }
    }
}

/// The batching task's end of a connection (its task ends when the last
/// handle is dropped).
pub(super) struct Batcher {
    calls: mpsc::UnboundedSender<Call>,
    /// Calls under way (sent and not answered), either way.
    busy: AtomicUsize,
    /// Calls abandoned by their callers and not yet sent or dropped.
    abandoned: Arc<AtomicUsize>,
}

/// One call under way, counted in `busy` until dropped.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A batched call's caller: dropped before the answer, it abandons it.
struct Caller<'a> {
    state: Arc<AtomicU8>,
    abandoned: &'a AtomicUsize,
}

impl Drop for Caller<'_> {
    fn drop(&mut self) {
        if self
            .state
            .compare_exchange(WAITED, LEFT, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Batcher {
    /// Starts the task on the current runtime.
    pub(super) fn start(conn: ConnectionManager) -> Batcher {
        let (calls, rx) = mpsc::unbounded_channel();
        let abandoned = Arc::new(AtomicUsize::new(0));
        tokio::spawn(write(rx, conn, abandoned.clone()));
        Batcher {
            calls,
            busy: AtomicUsize::new(0),
            abandoned,
        }
    }

    /// Sends `cmd` on `conn`, or, among a crowd of calls, with whatever
    /// other calls are ready; and waits for its own reply.
    pub(super) async fn query(&self, cmd: &Cmd, conn: &mut impl ConnectionLike) -> RedisResult<Value> {
        let crowded =
            self.busy.fetch_add(1, Ordering::SeqCst) >= CROWD || self.abandoned.load(Ordering::SeqCst) > 0;
        let _busy = Busy(&self.busy);
        if !crowded {
            return cmd.query_async(conn).await;
        }
        let (reply, answer) = oneshot::channel();
        let state = Arc::new(AtomicU8::new(WAITED));
        let call = Call {
            cmd: cmd.clone(),
            reply,
            state: state.clone(),
        };
        if self.calls.send(call).is_err() {
            return Err(gone());
        }
        let _caller = Caller {
            state,
            abandoned: &self.abandoned,
        };
        answer.await.map_err(|_| gone())?
    }
}

fn gone() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the store's connection task has ended",
    ))
}

async fn write(mut rx: mpsc::UnboundedReceiver<Call>, conn: ConnectionManager, abandoned: Arc<AtomicUsize>) {
    // Held by a pipeline until it has queued for the connection: the next
    // one is made only then, so they queue in order.
    let turn = Arc::new(tokio::sync::Mutex::new(()));
    // Pipelines under way.
    let pipes = Arc::new(Semaphore::new(PIPES));
    while let Some(first) = rx.recv().await {
        // The callers woken with this one (by the same read of replies)
        // send theirs first.
        ready_ones_first().await;
        let mut calls = vec![first];
        while calls.len() < MOST {
            match rx.try_recv() {
                Ok(c) => calls.push(c),
                Err(_) => break,
            }
        }
        // (An abandoned call is dropped unsent, and settled.)
        calls.retain(|c| c.state.load(Ordering::SeqCst) != LEFT || !c.abandoned(&abandoned));
        if calls.is_empty() {
            continue;
        }
        let (Ok(pipe), mine) = (
            pipes.clone().acquire_owned().await,
            turn.clone().lock_owned().await,
        ) else {
            return;
        };
        tokio::spawn(send(calls, conn.clone(), abandoned.clone(), mine, pipe));
    }
}

/// Lets the tasks that are ready now run before this one goes on: it
/// wakes itself and returns `Pending` once, which puts it at the back of
/// the runtime's queue. (`tokio::task::yield_now` waits longer: its task
/// is woken only once the runtime has run out of ready tasks and polled
/// its I/O driver. Measured with it, `tollgate bench lock` on Redis ran
/// 5–8 % fewer pairs per second: docs/BENCHMARKS.md.)
pub(crate) async fn ready_ones_first() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await;
}

async fn send(
    calls: Vec<Call>,
    mut conn: ConnectionManager,
    abandoned: Arc<AtomicUsize>,
    turn: OwnedMutexGuard<()>,
    _pipe: OwnedSemaphorePermit,
) {
    let n = calls.len();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut waiting = Vec::with_capacity(n);
    for Call { cmd, reply, state } in calls {
        pipe.add_command(cmd);
        waiting.push(Call {
            cmd: Cmd::new(),
            reply,
            state,
        });
    }
    let mut sent = std::pin::pin!(pipe.query_async::<Vec<Value>>(&mut conn));
    // Polled once, the pipeline has queued for the connection: the next
    // may be made.
    let early = std::future::poll_fn(|cx| Poll::Ready(sent.as_mut().poll(cx))).await;
    drop(turn);
    let out = match early {
        Poll::Ready(out) => out,
        Poll::Pending => sent.await,
    };
    let answers: Vec<RedisResult<Value>> = match out {
        Ok(values) if values.len() == n => values.into_iter().map(Value::extract_error).collect(),
        Ok(values) => {
            let e = redis::RedisError::from((
                redis::ErrorKind::Client,
                "a pipeline's replies do not match its calls",
                format!("{n} calls, {} replies", values.len()),
            ));
            vec![Err(e); n]
        }
        Err(e) => vec![Err(e); n],
    };
    for (call, answer) in waiting.into_iter().zip(answers) {
        if !call.abandoned(&abandoned) {
            let _ = call.reply.send(answer);
        }
    }
}
