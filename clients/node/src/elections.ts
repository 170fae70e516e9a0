import { aborted } from "./errors.js";
import { Gate, Lease } from "./gates.js";
import type { Http } from "./http.js";
import { ROUTES } from "./routes.js";

/** Who leads an election, as the server read it. */
export interface Leader {
  label: string | null;
  /** Its fencing token; every later leader's is higher. */
  fence: number;
  /** When its leadership began (ms since the epoch, the store's clock). */
  since_ms: number;
  /** Time left on its lease when read. */
  ttl_ms: number;
  /** Its lease's handle (`gate.revoke` takes it). */
  handle: string;
}

export interface CampaignOptions {
  /** The leader's lease (default 30 s), renewed while it leads. */
  ttlMs?: number;
  /** How long a waiting candidate's ticket lives unasked (default 10 s). */
  heartbeatMs?: number;
  /** How long to wait to lead; default: as long as it takes. */
  waitMs?: number;
  /** Stops the campaign (the ticket is cancelled). */
  signal?: AbortSignal;
}

/** A leader election: the holder of a lock of that name leads. */
export class Election {
  readonly #http: Http;
  readonly name: string;

  constructor(http: Http, name: string) {
    this.#http = http;
    this.name = name;
  }

  /** Who leads now, or `null`. */
  async leader(): Promise<Leader | null> {
    const body = await this.#http.call<{ leader: Leader | null }>(ROUTES.election, { name: this.name });
    return body.leader;
  }

  /** Waits in line to lead as `label`; `null` if `waitMs` passed first.
   * The lease is kept alive: watch its `lost` signal, and `release()` it
   * to resign (the next candidate leads at once). */
  async campaign(label: string, options: CampaignOptions = {}): Promise<Lease | null> {
    const lease = await new Gate(this.#http, this.name).acquire({ ...options, capacity: 1, label });
    return lease?.keepAlive() ?? null;
  }

  /** The leader now, then each change (a new leader, or `null` for none),
   * from the server's event stream, until `signal` aborts. A stream that
   * breaks is opened again; a change missed meanwhile comes as the state
   * then (a leadership that began and ended while away is not seen). */
  async *observe(signal: AbortSignal): AsyncGenerator<Leader | null> {
    let last: number | null | undefined;
    const changed = (l: Leader | null) => (l?.fence ?? null) !== last;
    while (!signal.aborted) {
      try {
        for await (const { event, data } of this.#http.events(ROUTES.electionEvents, { name: this.name }, signal)) {
          if (event !== "hello" && event !== "leader") continue;
          const leader = ((data ?? {}) as { leader?: Leader | null }).leader ?? null;
          if (changed(leader)) {
            last = leader?.fence ?? null;
            yield leader;
          }
        }
      } catch (e) {
        if (signal.aborted) break;
        if (!(e instanceof Error && (e as { code?: string }).code === "unavailable")) throw e;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    throw aborted(signal);
  }
}
