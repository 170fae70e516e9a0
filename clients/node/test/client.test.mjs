// The client against a real `tollgate serve`, on the embedded store and on
// a real redis-server: the line's order and fences, a lease lost by a
// frozen process, a worker killed mid-job, the server restarted under a
// waiting client, bad input, and the routes checked against the server's
// own OpenAPI document.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { ROUTES, Lease, Ticket, Tollgate, TollgateError } from "../dist/index.js";
import { runScript, sleep, startRedis, startServer } from "./server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
let unique = 0;
const fresh = (what) => `${what}-${process.pid}-${++unique}`;

for (const store of ["embedded", "redis"]) {
  describe(`on the ${store} store`, () => {
    let redis;
    let server;
    let tg;
    before(async () => {
      redis = store === "redis" ? await startRedis() : undefined;
      server = await startServer({ redis: redis?.url });
      tg = new Tollgate(server.url);
    });
    after(async () => {
      await server.stop();
      redis?.stop();
    });

    test("two clients in line are granted in turn, fences rising", async () => {
      const name = fresh("title");
      const a = new Tollgate(server.url);
      const b = new Tollgate({ url: server.url, timeoutMs: 5000 });
      const holder = await a.gate(name).enter({ capacity: 1 });
      assert.ok(holder instanceof Lease);
      // Five waiters from two clients, entering one after the other.
      const tickets = [];
      for (let i = 0; i < 5; i++) {
        const t = await (i % 2 ? a : b).gate(name).enter({ capacity: 1, label: `w${i}` });
        assert.ok(t instanceof Ticket);
        assert.equal(t.position, i + 1);
        tickets.push(t);
      }
      const order = [];
      const done = tickets.map(async (t, i) => {
        const lease = await t.granted({ timeoutMs: 10_000 });
        order.push([i, lease.fence]);
        await sleep(20);
        await lease.release();
      });
      await holder.release();
      await Promise.all(done);
      assert.deepEqual(
        order.map(([i]) => i),
        [0, 1, 2, 3, 4],
      );
      let last = holder.fence;
      for (const [, fence] of order) {
        assert.ok(fence > last, `${fence} after ${last}`);
        last = fence;
      }
      assert.equal((await a.gate(name).stats()).used, 0);
    });

    test("onPosition hears each move within about a second, over the event stream", async () => {
      const name = fresh("line");
      const gate = tg.gate(name);
      const holder = await gate.enter({ capacity: 1 });
      const first = await gate.enter({ capacity: 1 });
      const mine = await gate.enter({ capacity: 1 });
      assert.equal(mine.position, 2);
      const heard = [];
      const started = Date.now();
      const waiting = mine.granted({ onPosition: (t) => heard.push([t.position, Date.now() - started]), timeoutMs: 20_000 });
      // Nobody moves for a while first.
      await sleep(1500);
      const releasedAt = Date.now() - started;
      await holder.release();
      const firstLease = await first.granted({ timeoutMs: 5000 });
      // Heard that it moved up, within about a second of the move.
      for (let i = 0; i < 50 && heard.length === 0; i++) await sleep(100);
      assert.deepEqual(heard.map(([p]) => p), [1]);
      assert.ok(heard[0][1] - releasedAt < 2500, `heard after ${heard[0][1] - releasedAt} ms`);
      await firstLease.release();
      const lease = await waiting;
      assert.ok(lease instanceof Lease);
      assert.ok(lease.fence > firstLease.fence);
      await lease.release();

      // Past its timeout: null, and the ticket is still in line.
      const held = await gate.enter({ capacity: 1 });
      const late = await gate.enter({ capacity: 1 });
      assert.equal(await late.granted({ onPosition: () => {}, timeoutMs: 400 }), null);
      assert.equal((await late.poll()).position, 1);
      // Aborted by the caller: the wait rejects and the ticket leaves the line.
      const stop = new AbortController();
      setTimeout(() => stop.abort(new Error("enough")), 300);
      await assert.rejects(late.granted({ onPosition: () => {}, signal: stop.signal }), /enough/);
      assert.equal((await gate.stats()).waiting, 0);
      // A ticket already gone is a typed error.
      await assert.rejects(late.granted({ onPosition: () => {} }), (e) => e instanceof TollgateError && e.isNotFound());
      await held.release();
    });

    test("withLock holds, renews, releases and rethrows", async () => {
      const name = fresh("job");
      const value = await tg.withLock(
        name,
        async (signal, lease) => {
          assert.equal(signal.aborted, false);
          // Held past three lease lengths: the renewals keep it.
          await sleep(700);
          assert.equal((await tg.gate(name).stats()).used, 1);
          return lease.fence;
        },
        { ttlMs: 200 },
      );
      assert.equal(typeof value, "number");
      assert.equal((await tg.gate(name).stats()).used, 0);
      await assert.rejects(
        tg.withLock(name, () => {
          throw new Error("the job failed");
        }),
        /the job failed/,
      );
      assert.equal((await tg.gate(name).stats()).used, 0);
      // A wait that runs out.
      const held = await tg.gate(name).enter({ capacity: 1 });
      await assert.rejects(tg.withLock(name, () => 1, { waitMs: 300 }), (e) => e instanceof TollgateError && e.isTimeout());
      assert.equal((await tg.gate(name).stats()).waiting, 0, "the timed-out ticket left the line");
      await held.release();
    });

    test("a read-write lock: readers together, a waiting writer holds back new readers", async () => {
      const name = fresh("rw");
      const gate = tg.gate(name);
      const r1 = await gate.enter({ mode: "shared" });
      const r2 = await gate.enter({ mode: "shared" });
      assert.ok(r1 instanceof Lease && r2 instanceof Lease, "two readers at once");
      const writer = gate.acquire({ mode: "exclusive", waitMs: 10_000 });
      await sleep(200);
      const late = await gate.tryEnter({ mode: "shared" });
      assert.ok(!(late instanceof Lease), "a reader entered past the waiting writer");
      await r1.release();
      await r2.release();
      const w = await writer;
      assert.ok(w instanceof Lease && w.fence > r2.fence);
      await assert.rejects(gate.enter({ mode: "shared", capacity: 3 }), (e) => e instanceof TollgateError && e.status === 400);
      await w.release();
      assert.equal(await tg.withRwLock(name, "shared", (signal, lease) => lease.fence > w.fence), true);
    });

    test("maxHoldMs lets go of a lock whose work hangs", async () => {
      const name = fresh("capped");
      const started = Date.now();
      const why = await tg.withLock(
        name,
        (signal) => new Promise((resolve) => signal.addEventListener("abort", () => resolve(signal.reason.code))),
        { ttlMs: 300, maxHoldMs: 900 },
      );
      const took = Date.now() - started;
      assert.equal(why, "lease_lost");
      assert.ok(took >= 800 && took < 3000, `held ${took} ms`);
      // The abort comes when the lease ends by this process's clock,
      // counted from a renewal's sending: the store lets go up to a round
      // trip later.
      const deadline = Date.now() + 1000;
      let next = await tg.gate(name).tryEnter({ capacity: 1 });
      while (!(next instanceof Lease) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
        next = await tg.gate(name).tryEnter({ capacity: 1 });
      }
      assert.ok(next instanceof Lease, "the lock was free after the cap");
      await next.release();
    });

    test("an election: campaign, observe every change, resign", async () => {
      const name = fresh("vote");
      const election = tg.election(name);
      const stop = new AbortController();
      const seen = [];
      const watching = (async () => {
        try {
          for await (const leader of election.observe(stop.signal)) {
            seen.push(leader?.label ?? null);
            if (seen.length === 4) stop.abort();
          }
        } catch (e) {
          if (!stop.signal.aborted) throw e;
        }
      })();
      await sleep(300);
      const a = await election.campaign("a");
      assert.equal((await election.leader()).label, "a");
      const b = election.campaign("b", { waitMs: 10_000 });
      await sleep(300);
      await a.release();
      const bl = await b;
      assert.ok(bl.fence > a.fence);
      assert.equal((await election.leader()).fence, bl.fence);
      await sleep(300);
      await bl.release();
      await watching;
      assert.deepEqual(seen, [null, "a", "b", null]);
      assert.equal(await election.leader(), null);
    });

    test("a ticket an admin removed is told so, not queued again", async () => {
      const name = fresh("removed");
      const gate = tg.gate(name);
      const held = await gate.enter({ capacity: 1 });
      const waiting = tg.gate(name).acquire({ capacity: 1 });
      let line = [];
      while (line.length === 0) line = (await gate.line()).line;
      await gate.removeFromLine(line[0].number);
      await assert.rejects(waiting, (e) => e instanceof TollgateError && e.isRemoved() && !e.isNotFound());
      assert.equal((await gate.stats()).waiting, 0, "it did not queue again");
      await held.release();
    });

    test("renewals keep the lease's own length", async () => {
      const name = fresh("ttl");
      const lease = await tg.gate(name).acquire({ capacity: 1, ttlMs: 3000 });
      await lease.renew();
      assert.equal(lease.ttlMs, 3000);
      const { holders } = await tg.gate(name).holders();
      assert.ok(holders[0].ttl_ms <= 3000, JSON.stringify(holders));
      await lease.release();
    });

    test("a lease from a long wait in line is not taken for lost", async () => {
      const name = fresh("long");
      const held = await tg.gate(name).enter({ capacity: 1 });
      // Granted after a wait longer than its own length.
      setTimeout(() => void held.release(), 800);
      const lease = await tg.gate(name).acquire({ ttlMs: 500 });
      lease.keepAlive();
      await sleep(700);
      assert.equal(lease.lost.aborted, false, String(lease.lost.reason));
      await lease.release();
    });

    test("lost aborts at the lease's end when no renewal gets through", async () => {
      const name = fresh("hung");
      // Renewals that never come back (a server that hangs).
      const hanging = (url, init) => (String(url).includes("/renew") ? new Promise(() => {}) : fetch(url, init));
      const holder = new Tollgate({ url: server.url, fetch: hanging });
      const started = Date.now();
      let lostAfter;
      await holder.withLock(
        name,
        (signal) =>
          new Promise((resolve) =>
            signal.addEventListener("abort", () => {
              lostAfter = Date.now() - started;
              resolve();
            }),
          ),
        { ttlMs: 600 },
      );
      assert.ok(lostAfter >= 500 && lostAfter < 1500, `lost after ${lostAfter} ms`);
    });

    test("a wait that fails leaves no ticket behind", async () => {
      const name = fresh("blip");
      const held = await tg.gate(name).enter({ capacity: 1 });
      // The ticket's polls fail (a network blip); the cancel goes through.
      const flaky = (url, init) =>
        init?.method === "GET" && String(url).includes("/tickets/") ? Promise.reject(new TypeError("fetch failed")) : fetch(url, init);
      const b = new Tollgate({ url: server.url, fetch: flaky });
      await assert.rejects(b.withLock(name, () => 1), (e) => e.isUnavailable());
      assert.equal((await tg.gate(name).stats()).waiting, 0);
      await held.release();
      assert.equal((await tg.gate(name).stats()).used, 0, "nobody was handed the lock");
    });

    test("a lease lost by a frozen holder: its signal aborts, the next fence is higher", async () => {
      const name = fresh("frozen");
      const holder = runScript("holder.mjs", { TOLLGATE_URL: server.url, LOCK: name, TTL_MS: "1000" });
      const fence = Number((await holder.line(/^held /)).split(" ")[1]);
      holder.child.kill("SIGSTOP");
      // Past the lease: the next holder is granted.
      const next = await tg.gate(name).acquire({ waitMs: 5000 });
      assert.ok(next instanceof Lease);
      assert.ok(next.fence > fence, `${next.fence} > ${fence}`);
      holder.child.kill("SIGCONT");
      assert.equal(await holder.line(/^lost /), "lost lease_lost");
      await holder.line(/^done$/);
      await next.release();
    });

    test("a worker killed mid-job: the job is delivered again", async () => {
      const queue = fresh("q");
      const pushed = await tg.queue(queue).push({ n: 1 });
      const worker = runScript("worker.mjs", { TOLLGATE_URL: server.url, QUEUE: queue, LEASE_MS: "500" });
      assert.equal(await worker.line(/^running /), `running ${pushed.id} 1`);
      worker.child.kill("SIGKILL");
      const seen = [];
      const w = tg.worker(
        queue,
        (payload, job) => {
          seen.push([payload, job.attempt]);
        },
        { waitMs: 500 },
      );
      for (let i = 0; i < 100 && seen.length === 0; i++) await sleep(50);
      await w.stop();
      assert.deepEqual(seen, [[{ n: 1 }, 2]]);
      const stats = await tg.queue(queue).stats();
      assert.deepEqual(
        [stats.acked, stats.redelivered, stats.ready, stats.in_flight, stats.delayed],
        [1, 1, 0, 0, 0],
        JSON.stringify(stats),
      );
    });

    test("groups take turns; a group at its limit waits while others run", async () => {
      const q = tg.queue(fresh("q"));
      assert.deepEqual(await q.setLimits({ group_concurrency: 1, rate: "100000/s" }), {
        concurrency: null,
        rate: "100000/s",
        group_concurrency: 1,
        group_rate: null,
      });
      for (const [id, group] of [["a1", "a"], ["a2", "a"], ["b1", "b"]]) await q.push(id, { id, group });
      const got = await q.claim({ max: 10, leaseMs: 60_000 });
      assert.deepEqual(got.map((d) => [d.id, d.group]), [["a1", "a"], ["b1", "b"]]);
      const page = await q.groups({ limit: 10 });
      assert.deepEqual(page.groups.map((g) => [g.group, g.ready, g.running, g.held]), [
        ["a", 1, 1, "concurrency"],
        ["b", 0, 1, null],
      ]);
      await q.setGroupLimits("a", { concurrency: 2 });
      assert.deepEqual(await q.groupLimits("a"), { concurrency: 2, rate: null });
      assert.equal((await q.claim({ max: 10 })).length, 1, "a's second slot");
      await q.setGroupLimits("a", null);
      assert.equal(await q.groupLimits("a"), null);
      await assert.rejects(q.push("x", { group: "a b" }), (e) => e.code === "bad_request" && e.status === 400);
      await assert.rejects(q.setLimits({ concurrency: 0 }), (e) => e.status === 400);
      await got[0].ack();
      const stats = await q.stats();
      assert.deepEqual([stats.groups, stats.limited_claims], [2, 1], JSON.stringify(stats));
    });

    test("a schedule's jobs carry its group", async () => {
      const name = fresh("digest");
      const queue = fresh("q");
      const made = await tg.schedules.put(name, { when: "0 3 * * *", queue, payload: "d", group: "tenant-a", misfire: "once" });
      assert.deepEqual([made.result, made.group, made.misfire], ["created", "tenant-a", "once"]);
      const { job_id } = await tg.schedules.trigger(name);
      const job = await tg.queue(queue).get(job_id);
      assert.equal(job.group, "tenant-a");
      await assert.rejects(
        tg.schedules.put(name, { when: "0 3 * * *", queue, group: "a b" }),
        (e) => e.code === "bad_request" && e.status === 400 && e.message.includes("group"),
      );
      await tg.schedules.delete(name);
    });

    test("a handler that throws nacks with its message", async () => {
      const queue = fresh("q");
      await tg.queue(queue).push("x", { id: "j1", maxAttempts: 1 });
      let ran = 0;
      const w = tg.worker(queue, () => {
        ran++;
        throw new Error("no such customer");
      }, { waitMs: 200 });
      for (let i = 0; i < 100 && ran === 0; i++) await sleep(20);
      await w.stop();
      const job = await tg.queue(queue).get("j1");
      assert.equal(job.state, "dead");
      assert.equal(job.last_error, "no such customer");
    });
  });
}

describe("errors and the server's routes", () => {
  let redis;
  let server;
  before(async () => {
    redis = await startRedis();
    server = await startServer({ redis: redis.url });
  });
  after(async () => {
    await server.stop();
    redis.stop();
  });

  test("bad input is a TollgateError with the server's code", async () => {
    const tg = new Tollgate(server.url);
    const name = fresh("bad");
    await assert.rejects(tg.gate(name).enter({ ttlMs: 1 }), (e) => {
      assert.ok(e instanceof TollgateError);
      assert.equal(e.code, "bad_request");
      assert.equal(e.status, 400);
      assert.ok(e.isInvalid() && !e.isUnavailable());
      return true;
    });
    await tg.gate(name).enter({ capacity: 2 });
    await assert.rejects(tg.gate(name).enter({ capacity: 3 }), (e) => e.code === "capacity_conflict" && e.isConflict());
    await assert.rejects(tg.queue(fresh("never")).stats(), (e) => e.code === "queue_not_found" && e.isNotFound());
    const limit = tg.limit(fresh("api"));
    assert.equal((await limit.check("k", { rate: "1/min" })).allowed, true);
    const refused = await limit.check("k", { rate: "1/min" });
    assert.equal(refused.allowed, false, "a refusal is an answer");
    assert.ok(refused.retry_after_ms > 0);
  });

  test("a server that is down is unavailable; restarted, the client carries on", async () => {
    const tg = new Tollgate({ url: server.url, timeoutMs: 2000 });
    const name = fresh("restart");
    const first = await tg.gate(name).enter({ capacity: 1, ttlMs: 60_000 });
    // (A short heartbeat: the ticket of the wait that fails is left in
    // line, the server being down, until its heartbeat lapses.)
    const waiting = tg
      .gate(name)
      .acquire({ waitMs: 30_000, heartbeatMs: 300 })
      .then(
        () => null,
        (e) => e,
      );
    await sleep(200);
    await server.stop();
    const e = await waiting;
    assert.ok(e instanceof TollgateError && e.isUnavailable() && e.status === undefined, String(e));
    await assert.rejects(tg.gate(name).stats(), (e) => e.isUnavailable() && /cannot reach/.test(e.message));
    server = await startServer({ redis: redis.url, port: server.port });
    // The lease lives in Redis: the same holder releases it, and the
    // next acquire is granted.
    await first.release();
    const next = await tg.gate(name).acquire({ waitMs: 5000 });
    assert.ok(next.fence > first.fence);
    await next.release();
  });

  test("a server that accepts and never answers is unavailable after timeoutMs", async () => {
    const silent = createServer(() => {});
    await new Promise((ok) => silent.listen(0, "127.0.0.1", ok));
    const held = [];
    silent.on("connection", (s) => held.push(s));
    try {
      const tg = new Tollgate({ url: `http://127.0.0.1:${silent.address().port}`, timeoutMs: 300 });
      const started = Date.now();
      await assert.rejects(tg.gate("g").stats(), (e) => e.isUnavailable() && /no answer .* within 300 ms/.test(e.message));
      assert.ok(Date.now() - started < 2000);
    } finally {
      for (const s of held) s.destroy();
      silent.close();
    }
  });

  test("a token the server does not know is unauthorized", async () => {
    const token = "node-client-token-0123456789";
    const guarded = await startServer({ args: ["--token", token] });
    try {
      await assert.rejects(new Tollgate(guarded.url).gate("g").stats(), (e) => e.code === "unauthorized" && e.isUnauthorized());
      const lease = await new Tollgate({ url: guarded.url, token }).gate("g").enter({ capacity: 1 });
      await lease.release();
    } finally {
      await guarded.stop();
    }
  });

  test("every route and field the client uses is in /openapi.json", async () => {
    const doc = await (await fetch(`${server.url}/openapi.json`)).json();
    const resolve = (s) => (s?.$ref ? doc.components.schemas[s.$ref.split("/").pop()] : s);
    for (const [name, route] of Object.entries(ROUTES)) {
      const op = doc.paths[route.path]?.[route.method.toLowerCase()];
      assert.ok(op, `${name}: ${route.method} ${route.path} is not in /openapi.json`);
      const schema = resolve(op.requestBody?.content?.["application/json"]?.schema);
      for (const field of route.fields ?? []) {
        assert.ok(schema?.properties?.[field], `${name}: field ${field} is not in ${route.method} ${route.path}'s body`);
      }
      const params = new Set((op.parameters ?? []).map((p) => resolve(p)).filter((p) => p.in === "query").map((p) => p.name));
      for (const q of route.query ?? []) assert.ok(params.has(q), `${name}: query ${q} is not in ${route.method} ${route.path}`);
    }
  });

  test("the README's example runs as written", async () => {
    // The README shows examples/seed.mjs itself.
    const readme = readFileSync(join(here, "../README.md"), "utf8");
    const shown = readme.split("```js\n")[1].split("```")[0];
    assert.equal(shown, readFileSync(join(here, "../examples/seed.mjs"), "utf8"));
    const { stdout } = await promisify(execFile)(process.execPath, [join(here, "../examples/seed.mjs")], {
      env: { ...process.env, TOLLGATE_URL: server.url },
    });
    assert.equal(
      stdout,
      "second user waits at position 1\nsecond user holds title-A, fence higher\nthird user holds title-B: granted\n",
    );
  });
});
