// tollgate-client: fair locks, semaphores, per-resource lines, job
// queues, rate limits and waiting rooms over tollgate's HTTP API.

import { TollgateError } from "./errors.js";
import { Election } from "./elections.js";
import { Gate, type AcquireOptions, type Lease } from "./gates.js";
import { Http, type ClientOptions } from "./http.js";
import { Queue, Worker, type Handler, type WorkerOptions } from "./jobs.js";
import { Limit, Room, Schedules, list, type Kind } from "./misc.js";

export { TollgateError } from "./errors.js";
export { Election } from "./elections.js";
export type { CampaignOptions, Leader } from "./elections.js";
export { Busy, Gate, Lease, Ticket } from "./gates.js";
export type { AcquireOptions, EnterOptions, GateStats, Holder, LineEntry } from "./gates.js";
export type { ClientOptions } from "./http.js";
export { Delivery, Queue, Worker } from "./jobs.js";
export type {
  Backoff,
  ClaimOptions,
  GroupInfo,
  GroupLimits,
  Handler,
  PushOptions,
  Pushed,
  QueueLimits,
  WorkerOptions,
} from "./jobs.js";
export { Limit, Room, Schedules } from "./misc.js";
export type { CheckOptions, Decision, Kind, RoomLineEntry, RoomState, ScheduleSpec } from "./misc.js";
export { ROUTES } from "./routes.js";
export type { Route } from "./routes.js";

/** What `withLock` and `withPermits` run: `signal` aborts if the lease
 * is lost while `fn` runs (stop writing: another holder may have it). */
export type Held<T> = (signal: AbortSignal, lease: Lease) => Promise<T> | T;

export interface HoldOptions extends Omit<AcquireOptions, "capacity" | "permits" | "mode"> {
  /** Let go after this long held, however the renewals go: `fn`'s signal
   * aborts then. */
  maxHoldMs?: number;
}

/** A client of one tollgate server. */
export class Tollgate {
  readonly #http: Http;
  /** Schedules: a job pushed at each tick. */
  readonly schedules: Schedules;

  constructor(options: ClientOptions | string) {
    this.#http = new Http(typeof options === "string" ? { url: options } : options);
    this.schedules = new Schedules(this.#http);
  }

  gate(name: string): Gate {
    return new Gate(this.#http, name);
  }

  queue(name: string): Queue {
    return new Queue(this.#http, name);
  }

  limit(name: string): Limit {
    return new Limit(this.#http, name);
  }

  room(name: string): Room {
    return new Room(this.#http, name);
  }

  election(name: string): Election {
    return new Election(this.#http, name);
  }

  /** As `withLock`, holding the read-write lock `name` as a reader
   * (`shared`, among other readers) or the writer (`exclusive`, alone),
   * in arrival order: a waiting writer holds back the readers after it. */
  async withRwLock<T>(name: string, mode: "shared" | "exclusive", fn: Held<T>, options: HoldOptions = {}): Promise<T> {
    return this.#hold(name, { mode }, fn, options);
  }

  /** Runs `fn` holding the mutex `name`: waits in line for it, renews it
   * while `fn` runs, releases it when `fn` settles, and returns or
   * rethrows what `fn` did. A wait past `waitMs` throws a `TollgateError`
   * with code `wait_timeout`. */
  async withLock<T>(name: string, fn: Held<T>, options: HoldOptions = {}): Promise<T> {
    return this.withPermits(name, { limit: 1 }, fn, options);
  }

  /** As `withLock`, holding `permits` (default 1) of the semaphore `name`
   * of `limit` permits. */
  async withPermits<T>(
    name: string,
    size: { limit?: number; permits?: number },
    fn: Held<T>,
    options: HoldOptions = {},
  ): Promise<T> {
    return this.#hold(
      name,
      {
        ...(size.limit === undefined ? {} : { capacity: size.limit }),
        ...(size.permits === undefined ? {} : { permits: size.permits }),
      },
      fn,
      options,
    );
  }

  async #hold<T>(
    name: string,
    size: Pick<AcquireOptions, "capacity" | "permits" | "mode">,
    fn: Held<T>,
    options: HoldOptions,
  ): Promise<T> {
    const { maxHoldMs, ...acquire } = options;
    // Granted for no longer than it may be held.
    const ttlMs = maxHoldMs === undefined ? acquire.ttlMs : Math.min(acquire.ttlMs ?? 30_000, Math.max(10, maxHoldMs));
    const lease = await this.gate(name).acquire({ ...acquire, ...size, ...(ttlMs === undefined ? {} : { ttlMs }) });
    if (lease === null) {
      throw new TollgateError("wait_timeout", `not granted ${name} within ${options.waitMs} ms`);
    }
    lease.keepAlive(maxHoldMs === undefined ? {} : { maxHoldMs });
    let result: T;
    try {
      result = await fn(lease.lost, lease);
    } catch (e) {
      await lease.release().catch(() => undefined);
      throw e;
    }
    await lease.release();
    return result;
  }

  /** Runs `handler` on the jobs of `queue`, `concurrency` at a time, until
   * `stop()`. */
  worker(queue: string, handler: Handler, options: WorkerOptions = {}): Worker {
    return new Worker(this.queue(queue), handler, options);
  }

  /** Every gate, queue, room, limit or schedule (by `prefix`), with its
   * headline figures. */
  list(kind: Kind, options: { prefix?: string; pageSize?: number } = {}): AsyncGenerator<Record<string, unknown>> {
    return list(this.#http, kind, options);
  }
}
