// Every route and request field this client uses, in one place: the
// client builds its URLs from ROUTES, and a test checks each against the
// server's /openapi.json, so a route the server does not have fails the
// tests rather than a user's call.

/** A route: method, path template (as in the OpenAPI document) and the
 * request body fields the client may send. */
export interface Route {
  readonly method: "GET" | "POST" | "PUT" | "DELETE";
  readonly path: string;
  readonly fields?: readonly string[];
  readonly query?: readonly string[];
}

export const ROUTES = {
  gateStats: { method: "GET", path: "/v1/gates/{name}" },
  enter: {
    method: "POST",
    path: "/v1/gates/{name}/enter",
    fields: ["capacity", "permits", "mode", "ttl_ms", "heartbeat_ms", "queue", "label"],
  },
  ticket: { method: "GET", path: "/v1/gates/{name}/tickets/{ticket}", query: ["wait_ms"] },
  cancelTicket: { method: "DELETE", path: "/v1/gates/{name}/tickets/{ticket}" },
  ticketEvents: { method: "GET", path: "/v1/gates/{name}/tickets/{ticket}/events" },
  renew: { method: "POST", path: "/v1/gates/{name}/leases/{token}/renew", fields: ["ttl_ms"] },
  release: { method: "DELETE", path: "/v1/gates/{name}/leases/{token}" },
  setCapacity: { method: "PUT", path: "/v1/gates/{name}/capacity", fields: ["capacity"] },
  holders: { method: "GET", path: "/v1/gates/{name}/holders", query: ["limit"] },
  revoke: { method: "DELETE", path: "/v1/gates/{name}/holders/{handle}" },
  line: { method: "GET", path: "/v1/gates/{name}/line", query: ["limit"] },
  removeFromLine: { method: "DELETE", path: "/v1/gates/{name}/line/{number}" },
  election: { method: "GET", path: "/v1/elections/{name}" },
  electionEvents: { method: "GET", path: "/v1/elections/{name}/events" },

  push: {
    method: "POST",
    path: "/v1/queues/{queue}/jobs",
    fields: ["payload", "id", "delay_ms", "at_ms", "priority", "max_attempts", "backoff", "on_duplicate", "group"],
  },
  pushMany: { method: "POST", path: "/v1/queues/{queue}/batch", fields: ["jobs"] },
  claim: { method: "POST", path: "/v1/queues/{queue}/claim", query: ["wait_ms", "lease_ms", "max"] },
  ack: { method: "POST", path: "/v1/queues/{queue}/jobs/{id}/ack", fields: ["fence"] },
  nack: { method: "POST", path: "/v1/queues/{queue}/jobs/{id}/nack", fields: ["fence", "delay_ms", "error"] },
  extend: { method: "POST", path: "/v1/queues/{queue}/jobs/{id}/extend", fields: ["fence", "lease_ms"] },
  job: { method: "GET", path: "/v1/queues/{queue}/jobs/{id}" },
  cancelJob: { method: "DELETE", path: "/v1/queues/{queue}/jobs/{id}" },
  queueStats: { method: "GET", path: "/v1/queues/{queue}" },
  pauseQueue: { method: "POST", path: "/v1/queues/{queue}/pause" },
  resumeQueue: { method: "POST", path: "/v1/queues/{queue}/resume" },
  queueSettings: { method: "GET", path: "/v1/queues/{queue}/settings" },
  setQueueSettings: {
    method: "PUT",
    path: "/v1/queues/{queue}/settings",
    fields: ["concurrency", "rate", "group_concurrency", "group_rate"],
  },
  groups: { method: "GET", path: "/v1/queues/{queue}/groups", query: ["limit", "after"] },
  groupLimits: { method: "GET", path: "/v1/queues/{queue}/groups/{group}/limits" },
  setGroupLimits: { method: "PUT", path: "/v1/queues/{queue}/groups/{group}/limits", fields: ["concurrency", "rate"] },
  dropGroupLimits: { method: "DELETE", path: "/v1/queues/{queue}/groups/{group}/limits" },

  check: {
    method: "POST",
    path: "/v1/limits/{name}/check",
    fields: ["key", "cost", "rate", "burst", "algorithm"],
  },

  room: { method: "GET", path: "/v1/rooms/{room}" },
  roomCapacity: { method: "PUT", path: "/v1/rooms/{room}/capacity", fields: ["capacity"] },
  roomPause: { method: "POST", path: "/v1/rooms/{room}/pause" },
  roomResume: { method: "POST", path: "/v1/rooms/{room}/resume" },
  roomEndSession: { method: "DELETE", path: "/v1/rooms/{room}/sessions/{session}" },
  roomAdmissionRate: { method: "PUT", path: "/v1/rooms/{room}/admission_rate", fields: ["per_minute"] },
  roomReset: { method: "POST", path: "/v1/rooms/{room}/reset" },
  roomState: { method: "PUT", path: "/v1/rooms/{room}/state", fields: ["state"] },
  roomSchedule: { method: "PUT", path: "/v1/rooms/{room}/schedule", fields: ["opens_at", "closes_at", "prequeue"] },
  roomLine: { method: "GET", path: "/v1/rooms/{room}/line", query: ["limit"] },
  roomLineRemove: { method: "DELETE", path: "/v1/rooms/{room}/line/{number}" },

  putSchedule: {
    method: "PUT",
    path: "/v1/schedules/{name}",
    fields: ["when", "zone", "queue", "payload", "priority", "max_attempts", "group", "misfire", "paused"],
  },
  schedule: { method: "GET", path: "/v1/schedules/{name}" },
  deleteSchedule: { method: "DELETE", path: "/v1/schedules/{name}" },
  triggerSchedule: { method: "POST", path: "/v1/schedules/{name}/trigger" },

  listGates: { method: "GET", path: "/v1/gates", query: ["prefix", "cursor", "limit"] },
  listQueues: { method: "GET", path: "/v1/queues", query: ["prefix", "cursor", "limit"] },
  listRooms: { method: "GET", path: "/v1/rooms", query: ["prefix", "cursor", "limit"] },
  listLimits: { method: "GET", path: "/v1/limits", query: ["prefix", "cursor", "limit"] },
  listSchedules: { method: "GET", path: "/v1/schedules", query: ["prefix", "cursor", "limit"] },
} as const satisfies Record<string, Route>;

export type RouteName = keyof typeof ROUTES;
