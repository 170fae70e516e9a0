/** Every failure this client reports: an error answer of the server
 * (`code` and `status` as it sent them); `unavailable` when the server
 * could not be reached or did not answer in time, and `wait_timeout` when
 * a wait for a lease ran out (both with `status` undefined). */
export class TollgateError extends Error {
  override readonly name = "TollgateError";
  /** The server's error code (docs/HTTP.md, "Errors"), or `unavailable`
   * for a server that did not answer. */
  readonly code: string;
  /** The HTTP status, or undefined when there was no answer. */
  readonly status: number | undefined;
  /** How long the server asked to wait before trying again (`Retry-After`). */
  readonly retryAfterMs: number | undefined;

  constructor(code: string, message: string, status?: number, retryAfterMs?: number, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.code = code;
    this.status = status;
    this.retryAfterMs = retryAfterMs;
  }

  /** The store or the server is down or lagging; try again (as the
   * library's `ErrorKind::Unavailable`). */
  isUnavailable(): boolean {
    return this.code === "unavailable" || this.code === "store_unavailable" || this.code === "not_replicated";
  }

  /** A wait (`acquire`, `withLock`) ran out of time before it was granted. */
  isTimeout(): boolean {
    return this.code === "wait_timeout";
  }

  /** The ticket, lease, job, queue, room or route does not exist (any more). */
  isNotFound(): boolean {
    return this.status === 404;
  }

  /** An admin took the ticket out of the line (410 `ticket_removed`):
   * stop waiting rather than queue again. */
  isRemoved(): boolean {
    return this.code === "ticket_removed";
  }

  /** The request contradicts the stored state: a capacity, a lost job
   * lease, a running job. */
  isConflict(): boolean {
    return this.status === 409;
  }

  /** The request itself is wrong: fix it rather than retry. */
  isInvalid(): boolean {
    return this.status === 400 || this.status === 413 || this.status === 414 || this.status === 415;
  }

  /** No valid token, or a token whose role may not do this. */
  isUnauthorized(): boolean {
    return this.status === 401 || this.status === 403;
  }

  /** A limit turned the request away; see `retryAfterMs`. */
  isRateLimited(): boolean {
    return this.status === 429;
  }
}

/** Thrown by a wait the caller's `AbortSignal` ended. */
export function aborted(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason;
  return reason instanceof Error ? reason : new DOMException("the operation was aborted", "AbortError");
}
