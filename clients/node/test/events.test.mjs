// The event-stream reader against servers that misbehave: one that sends
// its head and then nothing (a frozen server) and one that never answers
// fail as `unavailable` once idle for the limit; events split across
// chunks and lines ending in CRLF arrive whole. And a wait given an
// already aborted signal does not start.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { ROUTES, Ticket, Tollgate, TollgateError } from "../dist/index.js";
import { Http } from "../dist/http.js";
import { startServer } from "./server.mjs";

const params = { name: "g", ticket: "t" };

function serve(handler) {
  const server = createServer(handler);
  return new Promise((ok) => server.listen(0, "127.0.0.1", () => ok(server)));
}
const urlOf = (server) => `http://127.0.0.1:${server.address().port}`;

async function collect(http, idleMs = 30_000) {
  const out = [];
  for await (const e of http.events(ROUTES.ticketEvents, params, new AbortController().signal, idleMs)) out.push(e);
  return out;
}

describe("the event-stream reader", () => {
  test("a stream that goes silent fails as unavailable after idleMs", async () => {
    const server = await serve((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(": hello\n\n");
      // …and nothing more, ever.
    });
    const started = Date.now();
    await assert.rejects(collect(new Http({ url: urlOf(server) }), 400), (e) => e instanceof TollgateError && e.isUnavailable() && /sent nothing/.test(e.message));
    assert.ok(Date.now() - started < 3000, `${Date.now() - started} ms`);
    server.closeAllConnections();
    server.close();
  });

  test("a server that never answers fails as unavailable after idleMs", async () => {
    const server = await serve(() => {});
    await assert.rejects(collect(new Http({ url: urlOf(server) }), 400), (e) => e instanceof TollgateError && e.isUnavailable());
    server.closeAllConnections();
    server.close();
  });

  test("events split across chunks and CRLF line ends arrive whole", async () => {
    const server = await serve(async (req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (const piece of ["event: posi", "tion\r", "\ndata: {\"position\":", "2}\r\n\r\n: keep-alive\n\n", "event: gone\ndata: {}\n\n"]) {
        res.write(piece);
        await new Promise((r) => setTimeout(r, 20));
      }
      res.end();
    });
    assert.deepEqual(await collect(new Http({ url: urlOf(server) })), [
      { event: "position", data: { position: 2 } },
      { event: "gone", data: {} },
    ]);
    server.close();
  });
});

describe("a wait on the event stream", () => {
  let server;
  before(async () => {
    server = await startServer();
  });
  after(async () => {
    await server.stop();
  });

  test("an already aborted signal ends it at once, the ticket cancelled", async () => {
    const gate = new Tollgate(server.url).gate(`pre-aborted-${process.pid}`);
    const holder = await gate.enter({ capacity: 1 });
    const ticket = await gate.enter({ capacity: 1 });
    assert.ok(ticket instanceof Ticket);
    const started = Date.now();
    await assert.rejects(ticket.granted({ onPosition: () => {}, signal: AbortSignal.abort(new Error("before")) }), /before/);
    assert.ok(Date.now() - started < 1000);
    assert.equal((await gate.stats()).waiting, 0);
    await holder.release();
  });
});
