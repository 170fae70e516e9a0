//! Script calls to one server, written together: callers hand their
//! `EVALSHA` to one task, which lets the callers that are ready run first
//! (one `yield_now`) and then sends what has come as one pipeline, in one
//! write. Without it, each call was its own `writev` (tokio runs a task
//! woken by the running one next, so the connection's writer ran after
//! every single send): at 50 concurrent callers, 0.8 writes per call and
//! a third of the client's CPU in them (`docs/BENCHMARKS.md`).
//!
//! - A server error answers only its own call (`ignore_errors`); a lost
//!   connection answers every call of the pipeline.
//! - Order: the pipelines queue for the connection in the order the calls
//!   came (each is awaited in a task of its own, which polls it once, so
//!   that it queues, before the next pipeline is made: a turn lock passed
//!   from the batching task to it), and a call goes straight to the
//!   connection only while no call handed to the task is unanswered. So a call made after another one
//!   was sent (an enter's clean-up `leave` after the enter was dropped) is
//!   not sent before it (while the connection is re-established, calls
//!   waiting for it may go in any order, as without this task).
//! - A call whose caller has gone (timed out, dropped) before it was sent
//!   is not sent.
//! - At most `PIPES` pipelines are under way; the rest wait in the task's
//!   queue (one call per waiting caller).
//! - The hop through the task costs latency, which a chain of hand-offs
//!   (a semaphore's line) pays at every step with little to batch: a call
//!   goes through it only while at least `CROWD` others are under way (or
//!   the task has unanswered calls), and straight to the connection
//!   otherwise.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};

/// At most this many calls in one pipeline.
const MOST: usize = 128;
/// At most this many pipelines under way.
const PIPES: usize = 64;
/// Calls under way from which a new one is batched.
const CROWD: usize = 8;

struct Call {
    cmd: Cmd,
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// The batching task's end of a connection (its task ends when the last
/// handle is dropped).
pub(super) struct Batcher {
    calls: mpsc::UnboundedSender<Call>,
    /// Calls under way (sent and not answered), either way.
    busy: AtomicUsize,
    /// Calls handed to the task and not answered (or dropped) by it yet.
    queued: Arc<AtomicUsize>,
}

/// One call under way, counted in `busy` until dropped.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Batcher {
    /// Starts the task on the current runtime.
    pub(super) fn start(conn: ConnectionManager) -> Batcher {
        let (calls, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        tokio::spawn(write(rx, conn, queued.clone()));
        Batcher {
            calls,
            busy: AtomicUsize::new(0),
            queued,
        }
    }

    /// Sends `cmd` on `conn`, or, among a crowd of calls, with whatever
    /// other calls are ready; and waits for its own reply.
    pub(super) async fn query(&self, cmd: &Cmd, conn: &mut impl ConnectionLike) -> RedisResult<Value> {
        let crowded =
            self.busy.fetch_add(1, Ordering::SeqCst) >= CROWD || self.queued.load(Ordering::SeqCst) > 0;
        let _busy = Busy(&self.busy);
        if !crowded {
            return cmd.query_async(conn).await;
        }
        let (reply, answer) = oneshot::channel();
        self.queued.fetch_add(1, Ordering::SeqCst);
        if self
            .calls
            .send(Call {
                cmd: cmd.clone(),
                reply,
            })
            .is_err()
        {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(gone());
        }
        answer.await.map_err(|_| gone())?
    }
}

fn gone() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the store's connection task has ended",
    ))
}

async fn write(mut rx: mpsc::UnboundedReceiver<Call>, conn: ConnectionManager, queued: Arc<AtomicUsize>) {
    // Held by a pipeline until it has queued for the connection: the next
    // one is made only then, so they queue in order.
    let turn = Arc::new(tokio::sync::Mutex::new(()));
    // Pipelines under way.
    let pipes = Arc::new(tokio::sync::Semaphore::new(PIPES));
    while let Some(first) = rx.recv().await {
        // The callers woken with this one (by the same read of replies)
        // send theirs first.
        tokio::task::yield_now().await;
        let mut calls = vec![first];
        while calls.len() < MOST {
            match rx.try_recv() {
                Ok(c) => calls.push(c),
                Err(_) => break,
            }
        }
        let before = calls.len();
        calls.retain(|c| !c.reply.is_closed());
        queued.fetch_sub(before - calls.len(), Ordering::SeqCst);
        if calls.is_empty() {
            continue;
        }
        let (Ok(pipe), mine) = (
            pipes.clone().acquire_owned().await,
            turn.clone().lock_owned().await,
        ) else {
            return;
        };
        tokio::spawn(send(calls, conn.clone(), queued.clone(), mine, pipe));
    }
}

async fn send(
    calls: Vec<Call>,
    mut conn: ConnectionManager,
    queued: Arc<AtomicUsize>,
    turn: tokio::sync::OwnedMutexGuard<()>,
    _pipe: tokio::sync::OwnedSemaphorePermit,
) {
    let n = calls.len();
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut replies = Vec::with_capacity(n);
    for Call { cmd, reply } in calls {
        pipe.add_command(cmd);
        replies.push(reply);
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
    queued.fetch_sub(n, Ordering::SeqCst);
    for (reply, answer) in replies.into_iter().zip(answers) {
        let _ = reply.send(answer);
    }
}
