import { TollgateError } from "./errors.js";
import type { Http } from "./http.js";
import { ROUTES } from "./routes.js";

export interface Backoff {
  kind: "fixed" | "exponential";
  base_ms: number;
  max_ms?: number;
}

export interface PushOptions {
  /** Your id: pushing it again is answered by `onDuplicate`. */
  id?: string;
  delayMs?: number;
  /** Due at this Unix time (ms). */
  atMs?: number;
  priority?: number;
  maxAttempts?: number;
  backoff?: Backoff;
  onDuplicate?: "keep" | "replace";
  /** The job's group (a tenant, a customer): groups take turns at claim
   * and may have limits of their own (`setLimits`, `setGroupLimits`). */
  group?: string;
}

/** A queue's limits, applied at claim (null or left out: none). A rate is
 * text: `50/s`, `600/min`, `5/250ms`. */
export interface QueueLimits {
  concurrency?: number | null;
  rate?: string | null;
  group_concurrency?: number | null;
  group_rate?: string | null;
}

/** One group's own limits, in place of the queue's group limits. */
export interface GroupLimits {
  concurrency?: number | null;
  rate?: string | null;
}

/** One group of a queue, as `groups()` lists it. */
export interface GroupInfo {
  /** null: the default group. */
  group: string | null;
  ready: number;
  running: number;
  held: "concurrency" | "rate" | null;
  held_until_ms: number | null;
  concurrency: number | null;
  rate: string | null;
}

export interface Pushed {
  id: string;
  result: "created" | "kept" | "replaced" | "busy";
  due_ms: number;
}

export interface ClaimOptions {
  /** Wait up to this long (at most 60 s) for a due job. Default 0. */
  waitMs?: number;
  /** The lease on each job claimed (default 30 s). */
  leaseMs?: number;
  /** At most this many jobs (default 1). */
  max?: number;
  signal?: AbortSignal;
}

interface JobBody {
  id: string;
  payload: unknown;
  payload_base64: string;
  attempt: number;
  fence: number;
  lease_until_ms: number;
  group?: string | null;
}

/** A job queue: run at a time, exactly one consumer at a time,
 * redelivered when its consumer's lease ends, retried, dead-lettered. */
export class Queue {
  readonly #http: Http;
  readonly name: string;

  constructor(http: Http, name: string) {
    this.#http = http;
    this.name = name;
  }

  /** Pushes one job. `payload` is any JSON value, or bytes (a `Uint8Array`). */
  async push(payload: unknown, options: PushOptions = {}): Promise<Pushed> {
    return this.#http.call(ROUTES.push, { queue: this.name }, { body: pushBody(payload, options) });
  }

  /** Pushes up to 1,000 jobs in one request, in order. */
  async pushMany(
    jobs: readonly ({ payload: unknown } & PushOptions)[],
  ): Promise<{ jobs: (Pushed | { id: string; error: { code: string; message: string } })[]; failed: number }> {
    return this.#http.call(
      ROUTES.pushMany,
      { queue: this.name },
      { body: { jobs: jobs.map((j) => pushBody(j.payload, j)) } },
    );
  }

  /** Claims due jobs (waiting up to `waitMs` for one): their deliveries,
   * possibly none. */
  async claim(options: ClaimOptions = {}): Promise<Delivery[]> {
    const waitMs = options.waitMs ?? 0;
    const body = await this.#http.call<{ jobs: JobBody[] }>(
      ROUTES.claim,
      { queue: this.name },
      {
        query: { wait_ms: waitMs, lease_ms: options.leaseMs, max: options.max },
        signal: options.signal,
        timeoutMs: waitMs + 10_000,
      },
    );
    return body.jobs.map((j) => new Delivery(this.#http, this.name, j));
  }

  async stats(): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.queueStats, { queue: this.name });
  }

  /** A job's state and attempts. */
  async get(id: string): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.job, { queue: this.name, id });
  }

  /** Cancels a waiting job (409 `job_running` while one runs it). */
  async cancel(id: string): Promise<{ result: string }> {
    return this.#http.call(ROUTES.cancelJob, { queue: this.name, id });
  }

  async pause(): Promise<{ paused: boolean; changed: boolean }> {
    return this.#http.call(ROUTES.pauseQueue, { queue: this.name });
  }

  async resume(): Promise<{ paused: boolean; changed: boolean }> {
    return this.#http.call(ROUTES.resumeQueue, { queue: this.name });
  }

  /** The queue's limits applied at claim. */
  async limits(): Promise<QueueLimits> {
    return this.#http.call(ROUTES.queueSettings, { queue: this.name });
  }

  /** Replaces the queue's limits (one left out is none); they apply from
   * the next claim, on every worker. */
  async setLimits(limits: QueueLimits): Promise<QueueLimits> {
    return this.#http.call(ROUTES.setQueueSettings, { queue: this.name }, { body: { ...limits } });
  }

  /** Group `group`'s own limits, or null if it has none. */
  async groupLimits(group: string): Promise<GroupLimits | null> {
    try {
      return await this.#http.call(ROUTES.groupLimits, { queue: this.name, group });
    } catch (e) {
      if (e instanceof TollgateError && e.code === "limits_not_found") return null;
      throw e;
    }
  }

  /** Sets group `group`'s own limits; with null, drops them (the queue's
   * group limits apply again). */
  async setGroupLimits(group: string, limits: GroupLimits | null): Promise<void> {
    if (limits === null) {
      await this.#http.call(ROUTES.dropGroupLimits, { queue: this.name, group });
    } else {
      await this.#http.call(ROUTES.setGroupLimits, { queue: this.name, group }, { body: { ...limits } });
    }
  }

  /** A page of the queue's groups with ready or running jobs, most ready
   * first; pass `next` as `after` for the next page. */
  async groups(options: { limit?: number; after?: string } = {}): Promise<{ groups: GroupInfo[]; next: string | null }> {
    return this.#http.call(ROUTES.groups, { queue: this.name }, { query: { limit: options.limit, after: options.after } });
  }
}

function pushBody(payload: unknown, o: PushOptions): Record<string, unknown> {
  const bytes = payload instanceof Uint8Array;
  return {
    ...(bytes ? { payload_base64: Buffer.from(payload).toString("base64") } : { payload }),
    id: o.id,
    delay_ms: o.delayMs,
    at_ms: o.atMs,
    priority: o.priority,
    max_attempts: o.maxAttempts,
    backoff: o.backoff,
    on_duplicate: o.onDuplicate,
    group: o.group,
  };
}

/** One claimed job. Only the holder of its lease (its `fence`) may ack,
 * nack or extend it: after the lease ends those answer 409 `lease_lost`. */
export class Delivery {
  readonly #http: Http;
  readonly queue: string;
  readonly id: string;
  /** The JSON payload, or the bytes of a binary one. */
  readonly payload: unknown;
  /** 1 for the first delivery of this job. */
  readonly attempt: number;
  readonly fence: number;
  leaseUntilMs: number;
  /** Its group; null for the default group. */
  readonly group: string | null;

  constructor(http: Http, queue: string, j: JobBody) {
    this.#http = http;
    this.queue = queue;
    this.id = j.id;
    this.payload = j.payload ?? new Uint8Array(Buffer.from(j.payload_base64, "base64"));
    this.attempt = j.attempt;
    this.fence = j.fence;
    this.leaseUntilMs = j.lease_until_ms;
    this.group = j.group ?? null;
  }

  /** Done: the job leaves the queue. */
  async ack(): Promise<void> {
    await this.#http.call(ROUTES.ack, { queue: this.queue, id: this.id }, { body: { fence: this.fence } });
  }

  /** Failed: retried after its backoff (or `delayMs`), or dead after its
   * last attempt, keeping `error`. */
  async nack(error?: string, delayMs?: number): Promise<{ result: "retry" | "dead"; due_ms?: number }> {
    return this.#http.call(
      ROUTES.nack,
      { queue: this.queue, id: this.id },
      { body: { fence: this.fence, error: error?.slice(0, 1024), delay_ms: delayMs } },
    );
  }

  /** Runs the lease `leaseMs` (default: the claim's) from now. */
  async extend(leaseMs?: number, timeoutMs?: number): Promise<void> {
    const body = await this.#http.call<{ lease_until_ms: number }>(
      ROUTES.extend,
      { queue: this.queue, id: this.id },
      { body: { fence: this.fence, lease_ms: leaseMs }, ...(timeoutMs === undefined ? {} : { timeoutMs }) },
    );
    this.leaseUntilMs = body.lease_until_ms;
  }
}

export interface WorkerOptions {
  /** Jobs run at once (default 1). */
  concurrency?: number;
  /** The lease on each job, extended every third of it while the handler
   * runs (default 30 s). */
  leaseMs?: number;
  /** How long each claim waits for a due job (default 5 s, at most 60):
   * also how long `stop()` may wait for the claim in flight, whose job,
   * if one comes, is handled before the worker stops. */
  waitMs?: number;
  /** Hears what went wrong between jobs (a claim or an ack that failed);
   * the worker carries on. Default: nothing. */
  onError?: (e: unknown) => void;
}

/** The handler of a worker: resolve to ack, throw (or reject) to nack
 * with the error's message. `signal` aborts when the job's lease is lost
 * (an extension answered so, or its time ran out before one got
 * through): another consumer may get the job, so stop acting on it. */
export type Handler = (payload: unknown, job: Delivery, signal: AbortSignal) => unknown;

/** A running worker: `stop()` claims no more and resolves once the claim
 * in flight has come back and the jobs in hand have been handled and
 * acked (or nacked). */
export class Worker {
  readonly #stopping = new AbortController();
  readonly done: Promise<void>;

  constructor(queue: Queue, handler: Handler, options: WorkerOptions = {}) {
    const slots = Math.max(1, options.concurrency ?? 1);
    const loops = Array.from({ length: slots }, () => this.#loop(queue, handler, options));
    this.done = Promise.all(loops).then(() => undefined);
  }

  get stopping(): boolean {
    return this.#stopping.signal.aborted;
  }

  async stop(): Promise<void> {
    this.#stopping.abort();
    await this.done;
  }

  async #loop(queue: Queue, handler: Handler, o: WorkerOptions): Promise<void> {
    const leaseMs = o.leaseMs ?? 30_000;
    const signal = this.#stopping.signal;
    // A throwing onError must not end the loop.
    const report = (e: unknown): void => {
      try {
        o.onError?.(e);
      } catch {
        // (Nothing better to do with it.)
      }
    };
    while (!signal.aborted) {
      let jobs: Delivery[];
      const sent = Date.now();
      try {
        // Not aborted by stop(): a job the server hands out as the poll
        // is dropped would stay leased to nobody (and spend an attempt).
        jobs = await queue.claim({ waitMs: o.waitMs ?? 5_000, leaseMs, max: 1 });
      } catch (e) {
        if (signal.aborted) return;
        report(e);
        await sleep(1000, signal);
        continue;
      }
      for (const job of jobs) await run(job, handler, leaseMs, sent, report);
    }
  }
}

async function run(job: Delivery, handler: Handler, leaseMs: number, claimedAt: number, onError: (e: unknown) => void): Promise<void> {
  const lost = new AbortController();
  // When the lease ends unless extended, as this process sees it: counted
  // from when the claim or extension was sent (never later than the
  // server's end, whatever the clocks say).
  let expires = claimedAt + leaseMs;
  let deadline: ReturnType<typeof setTimeout> | undefined;
  const lose = (e: unknown): void => {
    clearInterval(timer);
    clearTimeout(deadline);
    if (!lost.signal.aborted) lost.abort(e);
  };
  const arm = (): void => {
    clearTimeout(deadline);
    deadline = setTimeout(
      () => lose(new TollgateError("lease_lost", `job ${job.id}: its lease ran out before an extension got through`)),
      Math.max(0, expires - Date.now()),
    );
  };
  const timer = setInterval(() => {
    const sent = Date.now();
    job.extend(leaseMs, Math.max(1, expires - sent)).then(
      () => {
        if (lost.signal.aborted) return;
        expires = sent + leaseMs;
        arm();
      },
      (e: unknown) => {
        if (e instanceof TollgateError && e.code === "lease_lost") lose(e);
      },
    );
  }, Math.max(10, leaseMs / 3));
  arm();
  let failure: unknown;
  let failed = false;
  try {
    await handler(job.payload, job, lost.signal);
  } catch (e) {
    failed = true;
    failure = e;
  } finally {
    clearInterval(timer);
    clearTimeout(deadline);
  }
  // Another consumer may have the job now: its ack or nack is not ours.
  if (lost.signal.aborted) return;
  try {
    if (failed) await job.nack(failure instanceof Error ? failure.message : String(failure));
    else await job.ack();
  } catch (e) {
    onError(e);
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

