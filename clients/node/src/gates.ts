import { TollgateError, aborted } from "./errors.js";
import type { Http } from "./http.js";
import { ROUTES } from "./routes.js";

/** The longest wait one long-poll may ask for (the server's cap). */
const LONG_POLL_MS = 60_000;
/** How long a failed wait tries to take its ticket out of line. */
const CANCEL_MS = 2_000;

export interface EnterOptions {
  /** The gate's capacity; stored by the first request that names one. */
  capacity?: number;
  /** Permits to take (default 1). */
  permits?: number;
  /** A read-write lock's hold: `shared` (a reader, among others) or
   * `exclusive` (the writer, alone). Sets capacity and permits: give
   * neither with it. */
  mode?: "shared" | "exclusive";
  /** The lease's length (default 30 s). */
  ttlMs?: number;
  /** How long a waiting ticket lives without being asked about (default 10 s). */
  heartbeatMs?: number;
  /** Shown in the holders list and the line (1 to 64 printable ASCII). */
  label?: string;
}

export interface AcquireOptions extends EnterOptions {
  /** How long to wait in line; default: as long as it takes. */
  waitMs?: number;
  /** Stops the wait (the ticket is cancelled). */
  signal?: AbortSignal;
}

interface GrantedBody {
  status: "granted";
  token: string;
  fence: number;
  ttl_ms: number;
}
interface QueuedBody {
  status: "queued";
  ticket?: string;
  position: number;
  waiting: number;
  eta_ms: number | null;
}
interface BusyBody {
  status: "busy";
  used: number;
  capacity: number;
  waiting: number;
}

/** A gate: at most its capacity in permits held at once, the rest in line. */
export class Gate {
  readonly #http: Http;
  readonly name: string;

  constructor(http: Http, name: string) {
    this.#http = http;
    this.name = name;
  }

  /** One step: granted at once (a `Lease`), or in line (a `Ticket`). */
  async enter(options: EnterOptions = {}): Promise<Lease | Ticket> {
    const answer = await this.#enter(options, true);
    if (answer instanceof Busy) throw new Error("unreachable: a queueing enter was busy");
    return answer;
  }

  /** Granted at once, or `Busy` without joining the line. */
  async tryEnter(options: EnterOptions = {}): Promise<Lease | Busy> {
    const answer = await this.#enter(options, false);
    if (answer instanceof Ticket) throw new Error("unreachable: a non-queueing enter queued");
    return answer;
  }

  async #enter(options: EnterOptions, queue: boolean, signal?: AbortSignal): Promise<Lease | Ticket | Busy> {
    const sent = Date.now();
    const body = await this.#http.call<GrantedBody | QueuedBody | BusyBody>(
      ROUTES.enter,
      { name: this.name },
      {
        body: {
          capacity: options.capacity,
          permits: options.permits,
          mode: options.mode,
          ttl_ms: options.ttlMs,
          heartbeat_ms: options.heartbeatMs,
          label: options.label,
          queue,
        },
        signal,
      },
    );
    switch (body.status) {
      case "granted":
        return new Lease(this.#http, this.name, body, sent);
      case "queued":
        return new Ticket(this.#http, this.name, body);
      default:
        return new Busy(body);
    }
  }

  /** Waits in line for a lease: `null` if `waitMs` passed first (the
   * ticket is then cancelled). A ticket that lapsed while this process
   * could not ask about it (frozen past its heartbeat) enters again, at
   * the back. */
  async acquire(options: AcquireOptions = {}): Promise<Lease | null> {
    const { signal } = options;
    const deadline = options.waitMs === undefined ? Infinity : Date.now() + options.waitMs;
    for (;;) {
      const entered = await this.#enter(options, true, signal);
      if (entered instanceof Lease) return entered;
      if (entered instanceof Busy) throw new Error("unreachable: a queueing enter was busy");
      try {
        const lease = await entered.granted({ timeoutMs: deadline - Date.now(), ...(signal ? { signal } : {}) });
        if (lease === null) await entered.cancel().catch(() => undefined);
        return lease;
      } catch (e) {
        if (e instanceof TollgateError && e.code === "ticket_not_found" && Date.now() < deadline) continue;
        throw e;
      }
    }
  }

  async stats(): Promise<GateStats> {
    return this.#http.call(ROUTES.gateStats, { name: this.name });
  }

  async setCapacity(capacity: number): Promise<GateStats> {
    return this.#http.call(ROUTES.setCapacity, { name: this.name }, { body: { capacity } });
  }

  async holders(limit?: number): Promise<{ holders: Holder[] }> {
    return this.#http.call(ROUTES.holders, { name: this.name }, { query: { limit } });
  }

  /** Ends the lease of the holder with `handle` (from `holders()`) now. */
  async revoke(handle: string): Promise<{ revoked: boolean }> {
    return this.#http.call(ROUTES.revoke, { name: this.name, handle });
  }

  async line(limit?: number): Promise<{ line: LineEntry[] }> {
    return this.#http.call(ROUTES.line, { name: this.name }, { query: { limit } });
  }

  /** Takes the ticket with `number` (from `line()`) out of the line. */
  async removeFromLine(number: number): Promise<{ removed: boolean }> {
    return this.#http.call(ROUTES.removeFromLine, { name: this.name, number });
  }
}

export interface GateStats {
  name: string;
  capacity: number;
  used: number;
  holders: number;
  waiting: number;
  grants: number;
  expiries: number;
  fence: number;
}

export interface Holder {
  label: string | null;
  ttl_ms: number;
  handle: string;
  fence: number | null;
}

export interface LineEntry {
  number: number;
  position: number;
  permits: number;
  label: string | null;
}

/** The gate was full and the request asked not to wait. */
export class Busy {
  readonly status = "busy";
  readonly used: number;
  readonly capacity: number;
  readonly waiting: number;

  constructor(body: BusyBody) {
    this.used = body.used;
    this.capacity = body.capacity;
    this.waiting = body.waiting;
  }
}

/** A place in a gate's line. Asking about it (`status`, `granted`) is
 * its heartbeat: a ticket nobody asks about for its heartbeat leaves. */
export class Ticket {
  readonly status = "queued";
  readonly #http: Http;
  readonly gate: string;
  readonly ticket: string;
  /** 1 for the head of the line; as last heard. */
  position: number;
  waiting: number;
  /** The estimated wait (ms), or null until the line has moved once. */
  etaMs: number | null;

  constructor(http: Http, gate: string, body: QueuedBody) {
    if (body.ticket === undefined) throw new TollgateError("bad_answer", "a queued answer without a ticket");
    this.#http = http;
    this.gate = gate;
    this.ticket = body.ticket;
    this.position = body.position;
    this.waiting = body.waiting;
    this.etaMs = body.eta_ms;
  }

  #update(body: QueuedBody): void {
    this.position = body.position;
    this.waiting = body.waiting;
    this.etaMs = body.eta_ms;
  }

  /** Asks once (waiting up to `waitMs` for the grant): the lease, or this
   * ticket with its position brought up to date. */
  async poll(waitMs = 0, signal?: AbortSignal): Promise<Lease | Ticket> {
    const body = await this.#http.call<GrantedBody | QueuedBody>(
      ROUTES.ticket,
      { name: this.gate, ticket: this.ticket },
      { query: { wait_ms: waitMs }, signal, timeoutMs: waitMs + 10_000 },
    );
    // A granted ticket's lease runs from when this answer picked it up:
    // from now (a long-poll's start could be a minute before that).
    if (body.status === "granted") return new Lease(this.#http, this.gate, body);
    this.#update(body);
    return this;
  }

  /** Waits for the grant: the lease, or `null` once `timeoutMs` passed,
   * the ticket still in line. A wait that ends otherwise (the `signal`,
   * an error) cancels the ticket. Without `onPosition`, a long-poll of up
   * to a minute at a time (each poll is the ticket's heartbeat); with it,
   * the ticket's event stream, so `onPosition` hears each change of place
   * within about a second (the server looks every second, and an open
   * stream is the heartbeat). */
  async granted(
    options: { timeoutMs?: number; signal?: AbortSignal; onPosition?: (t: Ticket) => void } = {},
  ): Promise<Lease | null> {
    const deadline = Date.now() + (options.timeoutMs ?? Infinity);
    try {
      if (options.onPosition !== undefined) return await this.#grantedByEvents(deadline, options.onPosition, options.signal);
      for (;;) {
        const left = deadline - Date.now();
        if (left <= 0) return null;
        const answer = await this.poll(Math.min(LONG_POLL_MS, Math.ceil(left)), options.signal);
        if (answer instanceof Lease) return answer;
      }
    } catch (e) {
      // Whatever ended the wait (the caller, the network, the server), a
      // ticket left in line would be granted to nobody: cancel it (a grant
      // that raced the cancel is released with it). Briefly: a server that
      // cannot answer now would only delay the error (and an exchange left
      // to finish would keep the process alive).
      await this.#http
        .call(ROUTES.cancelTicket, { name: this.gate, ticket: this.ticket }, { signal: AbortSignal.timeout(CANCEL_MS), timeoutMs: CANCEL_MS })
        .catch(() => undefined);
      if (options.signal?.aborted) throw aborted(options.signal);
      throw e;
    }
  }

  /** `granted` over the event stream, opened again if the server ends it
   * without an answer (it stops serving, say): the lease, or `null` at
   * `deadline`. */
  async #grantedByEvents(deadline: number, onPosition: (t: Ticket) => void, signal?: AbortSignal): Promise<Lease | null> {
    if (signal?.aborted) throw aborted(signal);
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const left = deadline - Date.now();
    // (A timer past 2^31 ms would fire at once: no timer is no deadline.)
    const timer = left < 2 ** 31 ? setTimeout(() => stop.abort(), Math.max(0, left)) : undefined;
    try {
      for (;;) {
        for await (const { event, data } of this.#http.events(
          ROUTES.ticketEvents,
          { name: this.gate, ticket: this.ticket },
          stop.signal,
        )) {
          const body = (data ?? {}) as Record<string, unknown>;
          if (event === "position") {
            const place = body as unknown as QueuedBody;
            const moved = place.position !== this.position || place.waiting !== this.waiting;
            this.#update(place);
            if (moved) onPosition(this);
          } else if (event === "granted") {
            const grant = body as Partial<GrantedBody>;
            if (typeof grant.token !== "string" || typeof grant.fence !== "number" || typeof grant.ttl_ms !== "number") {
              throw new TollgateError("bad_answer", "a granted event without its token, fence and ttl_ms");
            }
            return new Lease(this.#http, this.gate, { ...(grant as GrantedBody), status: "granted" });
          } else if (event === "gone") {
            throw new TollgateError("ticket_not_found", "the ticket left the line (cancelled, or its heartbeat lapsed)", 404);
          } else if (event === "error") {
            const code = typeof body.code === "string" ? body.code : "unavailable";
            if (code === "ticket_removed") {
              throw new TollgateError(code, "an admin removed the ticket from the line", 410);
            }
            throw new TollgateError(code, `the server could not look at the ticket (${code})`);
          }
        }
        if (stop.signal.aborted) break;
        // Ended without an answer: open it again, after a breath.
        await new Promise((r) => setTimeout(r, 250));
      }
    } catch (e) {
      // The deadline (not the caller): the ticket stays in line.
      if (stop.signal.aborted && !signal?.aborted) return null;
      throw e;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      // Closes the stream whichever way this ended.
      stop.abort();
    }
    return null;
  }

  /** Leaves the line; a grant that raced the cancel is released. */
  async cancel(): Promise<{ cancelled: boolean; released?: boolean }> {
    return this.#http.call(ROUTES.cancelTicket, { name: this.gate, ticket: this.ticket });
  }
}

/** A held lease: `fence` strictly increases per gate across grants; pass
 * it to what you protect. `keepAlive()` renews it until released, and
 * aborts `lost` if it ends first. */
export class Lease {
  readonly status = "granted";
  readonly #http: Http;
  readonly gate: string;
  readonly token: string;
  readonly fence: number;
  /** The lease's length: each renewal runs it this long again. */
  ttlMs: number;
  // Made on first use: most leases are released without anyone asking.
  #lostController: AbortController | undefined;
  /** When the lease ends unless renewed, as this process sees it: counted
   * from when the `enter` or renewal that set it was sent (so never later
   * than the server's end), or for a ticket's grant from the answer that
   * picked it up (the server starts it then). */
  #expires: number;
  #renewal: ReturnType<typeof setTimeout> | undefined;
  #deadline: ReturnType<typeof setTimeout> | undefined;
  #keeping = false;
  #released = false;
  /** When the request that granted it was sent (ms). */
  readonly #grantedAt: number;
  /** With keepAlive's `maxHoldMs`: renewals never carry it past this. */
  #holdUntil = Infinity;

  /** `sentAt`: when the request that granted it was sent (ms). */
  constructor(http: Http, gate: string, body: GrantedBody, sentAt: number = Date.now()) {
    this.#http = http;
    this.gate = gate;
    this.token = body.token;
    this.fence = body.fence;
    this.ttlMs = body.ttl_ms;
    this.#expires = sentAt + body.ttl_ms;
    this.#grantedAt = sentAt;
  }

  /** Aborted when the lease is known, or must be taken, to have ended
   * while held: a renewal answered that it is gone (revoked, or expired
   * while this process was frozen), or (with `keepAlive`) its time ran
   * out before a renewal got through, whatever requests are still in
   * flight. Its `reason` is a `TollgateError` with code `lease_lost`. */
  get lost(): AbortSignal {
    this.#lostController ??= new AbortController();
    return this.#lostController.signal;
  }

  /** Runs the lease `ttlMs` (default: its own length) again from now. */
  async renew(ttlMs: number = this.ttlMs, timeoutMs?: number): Promise<void> {
    const sent = Date.now();
    try {
      const body = await this.#http.call<{ ttl_ms: number }>(
        ROUTES.renew,
        { name: this.gate, token: this.token },
        { body: { ttl_ms: ttlMs }, ...(timeoutMs === undefined ? {} : { timeoutMs }) },
      );
      if (this.#released || this.lost.aborted) return;
      this.ttlMs = body.ttl_ms;
      this.#expires = sent + body.ttl_ms;
      this.#armDeadline();
    } catch (e) {
      if (e instanceof TollgateError && e.code === "lease_not_found" && !this.#released) this.#lose(e.message);
      throw e;
    }
  }

  /** Renews every third of the lease until `release()` (or the lease is
   * lost). A renewal that fails is tried again a second later; none may
   * wait past the lease's end, and when that comes with no renewal
   * through, `lost` aborts. While it runs, its timers keep the process
   * alive, as a held lease should. With `maxHoldMs`, no renewal carries
   * the lease past its grant + maxHoldMs: it ends then, and `lost` aborts
   * with a `lease_lost` error that says so (a holder whose work hangs
   * still lets go). */
  keepAlive(options: { maxHoldMs?: number } = {}): this {
    if (this.#keeping || this.#released || this.lost.aborted) return this;
    this.#keeping = true;
    if (options.maxHoldMs !== undefined) this.#holdUntil = this.#grantedAt + options.maxHoldMs;
    const next = (delay: number): void => {
      if (this.#released || this.lost.aborted) return;
      this.#renewal = setTimeout(() => void tick(), delay);
    };
    const tick = async (): Promise<void> => {
      if (this.#released || this.lost.aborted) return;
      const capped = Math.min(this.ttlMs, this.#holdUntil - Date.now());
      if (capped < 10) {
        // Held for maxHoldMs: no more renewals; lost at its end.
        this.#lose("it was held for its maxHoldMs", this.#expires);
        return;
      }
      try {
        const ttl = this.ttlMs;
        await this.renew(capped, Math.max(1, this.#expires - Date.now()));
        this.ttlMs = ttl;
        next(Math.max(10, this.ttlMs / 3));
      } catch {
        next(Math.min(1000, Math.max(10, this.#expires - Date.now())));
      }
    };
    this.#armDeadline();
    // A lease that would outlive its cap (one from the line runs to the
    // heartbeat first) is cut to it by a renewal at once.
    next(this.#expires > this.#holdUntil + 10 ? 0 : Math.max(10, this.ttlMs / 3));
    return this;
  }

  /** (Re)sets the timer that declares the lease lost at its end. */
  #armDeadline(): void {
    if (!this.#keeping) return;
    if (this.#deadline !== undefined) clearTimeout(this.#deadline);
    this.#deadline = setTimeout(
      () => this.#lose("its time ran out before a renewal got through"),
      Math.max(0, this.#expires - Date.now()),
    );
  }

  #lose(why: string, at?: number): void {
    if (at !== undefined && at > Date.now()) {
      this.#stop();
      this.#deadline = setTimeout(() => this.#lose(why), at - Date.now());
      return;
    }
    this.#stop();
    this.#lostController ??= new AbortController();
    if (!this.#lostController.signal.aborted) {
      this.#lostController.abort(new TollgateError("lease_lost", `lease on ${this.gate} lost: ${why}`));
    }
  }

  #stop(): void {
    clearTimeout(this.#renewal);
    clearTimeout(this.#deadline);
    this.#renewal = undefined;
    this.#deadline = undefined;
  }

  /** Gives the permits back (the next in line is granted in the same
   * step). Releasing twice, or a lease already gone, is not an error. */
  async release(): Promise<void> {
    this.#stop();
    if (this.#released) return;
    this.#released = true;
    try {
      await this.#http.call(ROUTES.release, { name: this.gate, token: this.token });
    } catch (e) {
      if (e instanceof TollgateError && e.code === "lease_not_found") return;
      this.#released = false;
      throw e;
    }
  }
}

// `await using lease = await gate.acquire(...)` where the runtime has
// explicit resource management (Node 20.4+, TypeScript 5.2+).
export interface Lease {
  [Symbol.asyncDispose](): Promise<void>;
}
if (typeof Symbol.asyncDispose === "symbol") {
  Object.defineProperty(Lease.prototype, Symbol.asyncDispose, {
    value(this: Lease): Promise<void> {
      return this.release();
    },
  });
}

function describe(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
