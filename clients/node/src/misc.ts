import type { Http } from "./http.js";
import { ROUTES } from "./routes.js";

/** A rate limit's decision (docs/LIMITS.md). */
export interface Decision {
  allowed: boolean;
  limit: number;
  remaining: number;
  retry_after_ms: number;
  reset_after_ms: number;
  degraded: boolean;
}

export interface CheckOptions {
  /** Units of the allowance this spends (default 1). */
  cost?: number;
  /** For a limit the server does not configure: e.g. "100/min". */
  rate?: string;
  burst?: number;
  algorithm?: "gcra" | "sliding_window" | "fixed_window";
}

/** A named rate limit: one round trip per decision. */
export class Limit {
  readonly #http: Http;
  readonly name: string;

  constructor(http: Http, name: string) {
    this.#http = http;
    this.name = name;
  }

  /** Spends `cost` of `key`'s allowance: the decision, allowed or not
   * (a refusal is an answer here, not an error). */
  async check(key: string, options: CheckOptions = {}): Promise<Decision> {
    return this.#http.call(
      ROUTES.check,
      { name: this.name },
      {
        body: { key, cost: options.cost, rate: options.rate, burst: options.burst, algorithm: options.algorithm },
        accept: [429],
      },
    );
  }
}

/** A waiting room's admin routes (docs/ROOMS.md). */
export class Room {
  readonly #http: Http;
  readonly name: string;

  constructor(http: Http, name: string) {
    this.#http = http;
    this.name = name;
  }

  async stats(): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.room, { room: this.name });
  }

  /** Changes how many visitors may be active at once, now. */
  async setCapacity(capacity: number): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.roomCapacity, { room: this.name }, { body: { capacity } });
  }

  async pause(): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.roomPause, { room: this.name });
  }

  async resume(): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.roomResume, { room: this.name });
  }

  /** Paces admissions to at most `perMinute` a minute (1 to 6000), or
   * stops pacing with `null`. */
  async setAdmissionRate(perMinute: number | null): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.roomAdmissionRate, { room: this.name }, { body: { per_minute: perMinute } });
  }

  /** Drops everyone waiting at once (active visitors stay): the stats
   * plus `dropped`. */
  async reset(): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.roomReset, { room: this.name });
  }

  /** Moves the room into `state` on every server at once: the stats,
   * plus `dropped` (how many were let go) for `sold_out`. */
  async setState(state: RoomState): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.roomState, { room: this.name }, { body: { state } });
  }

  /** When the room opens (RFC 3339, e.g. "2030-12-01T10:00:00Z"; `null`:
   * no opening), with its pre-queue (`prequeue`, a duration such as
   * "30m") and when it closes (`closesAt`; left out: never). The room's
   * state is kept; answers its stats. */
  async setSchedule(
    opensAt: string | null,
    options: { closesAt?: string; prequeue?: string } = {},
  ): Promise<Record<string, unknown>> {
    return this.#http.call(
      ROUTES.roomSchedule,
      { room: this.name },
      { body: { opens_at: opensAt, closes_at: options.closesAt, prequeue: options.prequeue } },
    );
  }

  /** The head of the line, head first (`limit` 1 to 1000, default 20). */
  async line(limit?: number): Promise<{ room: string; line: RoomLineEntry[] }> {
    return this.#http.call(ROUTES.roomLine, { room: this.name }, { query: { limit } });
  }

  /** Takes the visitor with `number` (from `line()`) out of the line. */
  async removeFromLine(number: number): Promise<{ removed: boolean }> {
    return this.#http.call(ROUTES.roomLineRemove, { room: this.name, number });
  }

  /** Ends a visitor's session: its place goes to the next in line, and
   * it is never let back in with that session. */
  async endSession(session: string): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.roomEndSession, { room: this.name, session });
  }
}

/** A room's state (docs/ROOMS.md, Room states). */
export type RoomState = "open" | "paused" | "closed" | "sold_out" | "passthrough";

/** One visitor in a room's line. */
export interface RoomLineEntry {
  number: number;
  position: number;
  age_ms: number;
}

export interface ScheduleSpec {
  /** A cron expression ("0 3 * * *") or an interval ("every 5m"). */
  when: string;
  zone?: string;
  queue: string;
  payload?: unknown;
  priority?: number;
  maxAttempts?: number;
  /** Each job's group (a tenant, a customer); the default group if left out. */
  group?: string;
  /** Ticks missed while no server fired: skip, once (one job), all (each). */
  misfire?: "skip" | "once" | "all";
  paused?: boolean;
}

/** Schedules: a job pushed to a queue at each tick. */
export class Schedules {
  readonly #http: Http;

  constructor(http: Http) {
    this.#http = http;
  }

  /** Creates `name`, or changes it to exactly `spec`. */
  async put(name: string, spec: ScheduleSpec): Promise<Record<string, unknown>> {
    const { maxAttempts, ...rest } = spec;
    return this.#http.call(ROUTES.putSchedule, { name }, { body: { ...rest, max_attempts: maxAttempts } });
  }

  async get(name: string): Promise<Record<string, unknown>> {
    return this.#http.call(ROUTES.schedule, { name });
  }

  async delete(name: string): Promise<{ deleted: boolean }> {
    return this.#http.call(ROUTES.deleteSchedule, { name });
  }

  /** Pushes the schedule's job now, besides its ticks. */
  async trigger(name: string): Promise<{ job_id: string }> {
    return this.#http.call(ROUTES.triggerSchedule, { name });
  }
}

export type Kind = "gates" | "queues" | "rooms" | "limits" | "schedules";

const LISTS = {
  gates: ROUTES.listGates,
  queues: ROUTES.listQueues,
  rooms: ROUTES.listRooms,
  limits: ROUTES.listLimits,
  schedules: ROUTES.listSchedules,
} as const;

/** Every name of `kind` (optionally with `prefix`), a page at a time. */
export async function* list(
  http: Http,
  kind: Kind,
  options: { prefix?: string; pageSize?: number } = {},
): AsyncGenerator<Record<string, unknown>> {
  let cursor: string | undefined;
  do {
    const page = await http.call<Record<string, unknown> & { next: string | null }>(
      LISTS[kind],
      {},
      { query: { prefix: options.prefix, cursor, limit: options.pageSize } },
    );
    yield* (page[kind] as Record<string, unknown>[]) ?? [];
    cursor = page.next ?? undefined;
  } while (cursor !== undefined);
}
