// The waiting-room admin calls against a real room: a `tollgate serve`
// whose room fronts a small upstream here, with visitors going through its
// proxy port as browsers would (each keeping its own cookie), on the
// embedded store and on a real redis-server.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Tollgate, TollgateError } from "../dist/index.js";
import { startRedis, startServer } from "./server.mjs";

const ROOM = "shop";
const SITE = "the site itself";

/** A visitor: one cookie jar (the room's one cookie) over fetch. */
function visitor(proxyUrl) {
  let cookie;
  return async () => {
    const res = await fetch(`${proxyUrl}/`, { headers: cookie ? { cookie } : {}, redirect: "manual" });
    const set = res.headers.get("set-cookie");
    if (set) cookie = set.split(";")[0];
    return res.text();
  };
}

for (const store of ["embedded", "redis"]) {
  describe(`a room on the ${store} store`, () => {
    let redis;
    let server;
    let site;
    let dir;
    const seen = [];
    before(async () => {
      site = createServer((req, res) => {
        seen.push(req.headers["tollgate-visitor"] ?? "");
        res.end(SITE);
      });
      await new Promise((r) => site.listen(0, "127.0.0.1", r));
      dir = mkdtempSync(join(tmpdir(), "tollgate-node-room-"));
      const config = join(dir, "tollgate.toml");
      writeFileSync(
        config,
        `[rooms.${ROOM}]\nupstream = "http://127.0.0.1:${site.address().port}"\ncapacity = 1\n` +
          `cookie_keys = ["a-cookie-key-for-the-client-tests-0123456789"]\n`,
      );
      redis = store === "redis" ? await startRedis() : undefined;
      server = await startServer({ redis: redis?.url, args: ["--config", config] });
    });
    after(async () => {
      await server.stop();
      redis?.stop();
      site.close();
      rmSync(dir, { recursive: true, force: true });
    });

    test("the admin calls steer real visitors", async () => {
      const room = new Tollgate(server.url).room(ROOM);
      const [a, b, late] = [visitor(server.proxyUrl), visitor(server.proxyUrl), visitor(server.proxyUrl)];
      // A gets the one slot; B waits in line.
      assert.equal(await a(), SITE);
      const aId = seen.at(-1);
      assert.ok(aId);
      assert.notEqual(await b(), SITE);
      let stats = await room.stats();
      assert.deepEqual([stats.capacity, stats.active, stats.waiting], [1, 1, 1]);
      const { line } = await room.line();
      assert.equal(line.length, 1);
      assert.equal(line[0].position, 1);

      // A second slot admits B at once.
      assert.equal((await room.setCapacity(2)).capacity, 2);
      assert.equal((await room.stats()).waiting, 0);
      assert.equal(await b(), SITE);

      // Paused, a newcomer waits though a slot is free; taken out by
      // number, the line is empty again.
      assert.equal((await room.pause()).paused, true);
      await room.setCapacity(3);
      assert.notEqual(await late(), SITE);
      const [entry] = (await room.line(5)).line;
      assert.deepEqual(await room.removeFromLine(entry.number), { removed: true });
      assert.equal((await room.stats()).waiting, 0);
      await assert.rejects(room.removeFromLine(entry.number), (e) => e instanceof TollgateError && e.isNotFound());
      assert.equal((await room.resume()).paused, false);

      // Pacing on, and off with null.
      assert.equal((await room.setAdmissionRate(60)).admissions_per_minute, 60);
      assert.equal((await room.setAdmissionRate(null)).admissions_per_minute, null);

      // An ended session is never let back in with its token.
      assert.deepEqual(await room.endSession(aId), { ended: true, was: "active" });
      const before = seen.length;
      await a();
      assert.ok(!seen.slice(before).includes(aId), "the ended session reached the site again");
      await assert.rejects(room.endSession(aId), (e) => e instanceof TollgateError && e.code === "session_not_found");

      // Reset drops everyone waiting.
      await room.setCapacity(1);
      await room.pause();
      await visitor(server.proxyUrl)();
      await visitor(server.proxyUrl)();
      assert.equal((await room.stats()).waiting, 2);
      const reset = await room.reset();
      assert.deepEqual([reset.dropped, reset.waiting], [2, 0]);
      await room.resume();

      // States on every server, and a schedule (the room draws its
      // pre-queue: the draw's commitment is in the stats), then none.
      assert.equal((await room.setState("closed")).state, "closed");
      assert.equal((await room.stats()).state, "closed");
      assert.equal((await room.setState("open")).state, "open");
      const sale = await room.setSchedule("2030-12-01T10:00:00Z", { closesAt: "2030-12-01T18:00:00Z", prequeue: "10m" });
      assert.deepEqual(
        [sale.opens_at, sale.closes_at, sale.prequeue_seconds],
        ["2030-12-01T10:00:00Z", "2030-12-01T18:00:00Z", 600],
      );
      assert.equal(sale.draw.status, "pending");
      assert.equal(sale.draw.commitment.length, 64);
      const cleared = await room.setSchedule(null);
      assert.deepEqual([cleared.opens_at, cleared.closes_at], [null, null]);
      await assert.rejects(room.setState("shut"), (e) => e instanceof TollgateError && e.isInvalid());

      // Bad input and unknown rooms are typed errors.
      await assert.rejects(room.setCapacity(0), (e) => e instanceof TollgateError && e.isInvalid() && e.status === 400);
      await assert.rejects(room.setAdmissionRate(6001), (e) => e instanceof TollgateError && e.isInvalid());
      await assert.rejects(new Tollgate(server.url).room("no-such-room").stats(), (e) => e.isNotFound());
      stats = await room.stats();
      assert.equal(stats.capacity, 1);
    });
  });
}
