import { TollgateError, aborted } from "./errors.js";
import type { Route } from "./routes.js";

/** How to reach a tollgate server. */
export interface ClientOptions {
  /** The server's base URL, e.g. `http://127.0.0.1:7700`. */
  url: string;
  /** A bearer token, when the server has `tokens` configured. */
  token?: string;
  /** How long one request may take before it fails as `unavailable`
   * (a long-poll gets its own wait on top). Default 10 s. */
  timeoutMs?: number;
  /** The `fetch` to use (default: the platform's). */
  fetch?: typeof fetch;
}

type Query = Record<string, string | number | boolean | undefined>;

export interface CallOptions {
  body?: unknown;
  query?: Query;
  signal?: AbortSignal | undefined;
  /** This request's own time limit (default: the client's). */
  timeoutMs?: number;
  /** Status codes whose JSON body is an answer, not an error. */
  accept?: readonly number[];
}

/** One JSON request at a time over `fetch`; errors become `TollgateError`s. */
export class Http {
  readonly base: string;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.base = options.url.replace(/\/+$/, "");
    this.#headers = { accept: "application/json" };
    if (options.token !== undefined) this.#headers.authorization = `Bearer ${options.token}`;
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** The URL of `route` with `params` filled in (each escaped). */
  url(route: Route, params: Record<string, string | number>, query?: Query): string {
    let url = this.base;
    for (const part of template(route.path)) {
      if (part.startsWith("{")) {
        const value = params[part.slice(1, -1)];
        if (value === undefined) throw new TypeError(`no value for ${part} in ${route.path}`);
        url += encodeURIComponent(String(value));
      } else {
        url += part;
      }
    }
    let sep = "?";
    for (const key in query) {
      const v = query[key];
      if (v === undefined) continue;
      url += `${sep}${encodeURIComponent(key)}=${encodeURIComponent(String(v))}`;
      sep = "&";
    }
    return url;
  }


  async call<T>(route: Route, params: Record<string, string | number>, options: CallOptions = {}): Promise<T> {
    const { signal } = options;
    if (signal?.aborted) throw aborted(signal);
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const headers = { ...this.#headers };
    let body: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    const url = this.url(route, params, options.query);
    // Only the caller's signal goes to fetch: a signal of our own on every
    // request (for the time limit) cost ~7 % of a request's time in
    // clients/node/bench.mjs. The time limit races the exchange instead; a
    // request that loses it is left to finish or fail on its own.
    const init: RequestInit = {
      method: route.method,
      headers,
      ...(body === undefined ? {} : { body }),
      ...(signal === undefined ? {} : { signal }),
    };
    const exchange = this.#exchange(url, route, init);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new TollgateError("unavailable", `no answer from ${this.base} within ${timeoutMs} ms`)),
        timeoutMs,
      );
    });
    try {
      const [response, text] = await Promise.race([exchange, late]);
      const value: unknown = text === "" ? undefined : parse(text);
      if (response.ok || options.accept?.includes(response.status)) return value as T;
      throw errorOf(response, value);
    } catch (e) {
      exchange.catch(() => undefined);
      if (signal?.aborted) throw aborted(signal);
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Opens the Server-Sent Events stream of `route` and yields its events
   * as they come (comments, the keep-alives, skipped) until the server
   * ends it; `signal` closes it. A refusal before the stream starts is
   * its `TollgateError`; a broken stream, or one that opens or sends
   * nothing (not even the keep-alive the server sends every 15 s) within
   * `idleMs`, `unavailable`. */
  async *events(
    route: Route,
    params: Record<string, string | number>,
    signal: AbortSignal,
    idleMs = 30_000,
  ): AsyncGenerator<{ event: string; data: unknown }> {
    if (signal.aborted) throw aborted(signal);
    const url = this.url(route, params);
    // The caller's signal, or silence for idleMs: a frozen server sends
    // nothing and closes nothing.
    const own = new AbortController();
    const follow = () => own.abort(signal.reason);
    signal.addEventListener("abort", follow, { once: true });
    let silent = false;
    let idle: ReturnType<typeof setTimeout> | undefined;
    const heard = () => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        silent = true;
        own.abort();
      }, idleMs);
    };
    const unavailable = (what: string, e: unknown) =>
      signal.aborted
        ? aborted(signal)
        : silent
          ? new TollgateError("unavailable", `${this.base} sent nothing on the event stream for ${idleMs} ms`)
          : new TollgateError("unavailable", `${what} ${this.base}: ${describe(e)}`, undefined, undefined, e);
    heard();
    try {
      let response: Response;
      try {
        response = await this.#fetch(url, { headers: { ...this.#headers, accept: "text/event-stream" }, signal: own.signal });
      } catch (e) {
        throw unavailable("cannot reach", e);
      }
      if (!response.ok || response.body === null) {
        const text = await response.text().catch(() => "");
        throw errorOf(response, text === "" ? undefined : parse(text));
      }
      try {
        yield* sseEvents(response.body as unknown as AsyncIterable<Uint8Array>, heard);
      } catch (e) {
        if (e instanceof TollgateError) throw e;
        throw unavailable("the event stream broke off from", e);
      }
    } finally {
      clearTimeout(idle);
      signal.removeEventListener("abort", follow);
      own.abort();
    }
  }

  /** Sends the request and reads the whole answer. */
  async #exchange(url: string, route: Route, init: RequestInit): Promise<[Response, string]> {
    let response: Response;
    try {
      try {
        response = await this.#fetch(url, init);
      } catch (e) {
        // A kept-alive connection the server closed (it restarted, or an
        // idle timeout) fails the request on it before any answer: a GET,
        // PUT or DELETE is safe to send again, once, on a new one. A POST
        // (enter, push) is not: it may have been carried out.
        if (route.method === "POST" || init.signal?.aborted) throw e;
        response = await this.#fetch(url, init);
      }
    } catch (e) {
      throw new TollgateError("unavailable", `cannot reach ${this.base}: ${describe(e)}`, undefined, undefined, e);
    }
    try {
      return [response, await response.text()];
    } catch (e) {
      throw new TollgateError("unavailable", `the answer from ${this.base} broke off: ${describe(e)}`, undefined, undefined, e);
    }
  }

}

/** The longest line an event stream may send (the server's are tiny). */
const MAX_EVENT_BYTES = 64 * 1024;

/** The events of a Server-Sent Events body, each as it completes
 * (comments, the keep-alives, skipped); `heard` is called on every chunk. */
async function* sseEvents(
  body: AsyncIterable<Uint8Array>,
  heard: () => void,
): AsyncGenerator<{ event: string; data: unknown }> {
  const decoder = new TextDecoder();
  let buffer = "";
  let event = "message";
  let data: string[] = [];
  for await (const chunk of body) {
    heard();
    buffer += decoder.decode(chunk, { stream: true });
    // An event ends at a blank line; lines end in \n, \r\n or \r.
    let end: RegExpExecArray | null;
    while ((end = /\r\n|\n|\r/.exec(buffer)) !== null) {
      // A \r at the very end may be half of a \r\n: wait for more.
      if (end[0] === "\r" && end.index === buffer.length - 1) break;
      const line = buffer.slice(0, end.index);
      buffer = buffer.slice(end.index + end[0].length);
      if (line === "") {
        if (data.length > 0) yield { event, data: parse(data.join("\n")) };
        event = "message";
        data = [];
      } else if (line.startsWith("event:")) {
        event = line.slice(6).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(line[5] === " " ? 6 : 5));
      }
      // (A line starting with ":" is a comment: the keep-alive.)
    }
    if (buffer.length > MAX_EVENT_BYTES) throw new TollgateError("bad_answer", "an event stream line over 64 KiB");
  }
}

const templates = new Map<string, string[]>();

/** A path template split into literal parts and `{name}` parts, once. */
function template(path: string): string[] {
  let parts = templates.get(path);
  if (parts === undefined) {
    parts = path.split(/(\{\w+\})/).filter((p) => p !== "");
    templates.set(path, parts);
  }
  return parts;
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function errorOf(response: Response, body: unknown): TollgateError {
  const retry = response.headers.get("retry-after");
  const retryAfterMs = retry !== null && /^\d+$/.test(retry) ? Number(retry) * 1000 : undefined;
  const e = (body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (typeof e?.code === "string") {
    return new TollgateError(e.code, typeof e.message === "string" ? e.message : e.code, response.status, retryAfterMs);
  }
  return new TollgateError(`http_${response.status}`, `HTTP ${response.status} ${response.statusText}`, response.status, retryAfterMs);
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message} (${cause.message})` : e.message;
  }
  return String(e);
}
