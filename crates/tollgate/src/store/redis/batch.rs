//! Script calls to one server, written together: callers hand their
//! `EVALSHA` to one task, which lets the callers that are ready run first
//! (one `yield_now`) and then sends what has come as one pipeline, in one
//! write. Without it, each call was its own `writev` (tokio runs a task
//! woken by the running one next, so the connection's writer ran after
//! every single send): at 50 concurrent callers, 0.8 writes per call and
//! a third of the client's CPU in them (`docs/BENCHMARKS.md`). Replies
//! come back in order on the multiplexed connection; each pipeline is
//! awaited in a task of its own, so the next one is written meanwhile.
//! A server error answers only its own call (`ignore_errors`); a lost
//! connection answers every call of the pipeline.
//! The hop through the task costs latency, which a chain of hand-offs
//! (a semaphore's line) pays at every step with little to batch: a call
//! goes through it only while at least `CROWD` others are under way, and
//! straight to the connection otherwise.

use std::sync::atomic::{AtomicUsize, Ordering};

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{mpsc, oneshot};

/// At most this many calls in one pipeline.
const MOST: usize = 128;
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
    /// Calls under way (sent and not answered).
    busy: AtomicUsize,
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
        tokio::spawn(write(rx, conn));
        Batcher {
            calls,
            busy: AtomicUsize::new(0),
        }
    }

    /// Sends `cmd` on `conn`, or, among a crowd of calls, with whatever
    /// other calls are ready; and waits for its own reply.
    pub(super) async fn query(&self, cmd: &Cmd, conn: &mut impl ConnectionLike) -> RedisResult<Value> {
        let crowded = self.busy.fetch_add(1, Ordering::Relaxed) >= CROWD;
        let _busy = Busy(&self.busy);
        if !crowded {
            return cmd.query_async(conn).await;
        }
        let cmd = cmd.clone();
        let (reply, answer) = oneshot::channel();
        self.calls.send(Call { cmd, reply }).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

fn gone() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::BrokenPipe,
        "the store's connection task has ended",
    ))
}

async fn write(mut rx: mpsc::UnboundedReceiver<Call>, conn: ConnectionManager) {
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
        tokio::spawn(send(calls, conn.clone()));
    }
}

async fn send(mut calls: Vec<Call>, mut conn: ConnectionManager) {
    if calls.len() == 1 {
        let Call { cmd, reply } = calls.remove(0);
        let _ = reply.send(cmd.query_async(&mut conn).await);
        return;
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut replies = Vec::with_capacity(calls.len());
    for Call { cmd, reply } in calls {
        pipe.add_command(cmd);
        replies.push(reply);
    }
    match pipe.query_async::<Vec<Value>>(&mut conn).await {
        Ok(values) if values.len() == replies.len() => {
            for (reply, value) in replies.into_iter().zip(values) {
                let _ = reply.send(value.extract_error());
            }
        }
        Ok(values) => {
            let e = redis::RedisError::from((
                redis::ErrorKind::Client,
                "a pipeline's replies do not match its calls",
                format!("{} calls, {} replies", replies.len(), values.len()),
            ));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
