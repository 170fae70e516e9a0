// The client's overhead over bare `fetch`: enter+release pairs per second
// through `Tollgate` against the same loop written with `fetch` alone, on
// one `tollgate serve` (embedded store) that this script starts, rounds
// interleaved; prints one JSON line per round and the medians.
//
//   npm ci && npm run build
//   TOLLGATE_BIN=../../target/release/tollgate ROUNDS=5 SECONDS=5 WORKERS=16 node bench.mjs
import { Tollgate } from "./dist/index.js";
import { startServer } from "./test/server.mjs";

const rounds = Number(process.env.ROUNDS ?? 5);
const seconds = Number(process.env.SECONDS ?? 5);
const workers = Number(process.env.WORKERS ?? 16);

const server = await startServer();
const json = { "content-type": "application/json", accept: "application/json" };

/** One worker's loop with bare fetch: enter, then release the lease. */
async function bare(name, until) {
  let n = 0;
  while (Date.now() < until) {
    const r = await fetch(`${server.url}/v1/gates/${name}/enter`, {
      method: "POST",
      headers: json,
      body: JSON.stringify({ capacity: 1, ttl_ms: 30_000 }),
    });
    const { token } = await r.json();
    const d = await fetch(`${server.url}/v1/gates/${name}/leases/${token}`, { method: "DELETE", headers: json });
    await d.text();
    n++;
  }
  return n;
}

/** The same loop through the client. */
async function client(name, until) {
  const tg = new Tollgate(server.url);
  let n = 0;
  while (Date.now() < until) {
    const lease = await tg.gate(name).enter({ capacity: 1, ttlMs: 30_000 });
    await lease.release();
    n++;
  }
  return n;
}

async function round(kind, loop, r) {
  const until = Date.now() + seconds * 1000;
  const counts = await Promise.all(Array.from({ length: workers }, (_, w) => loop(`bench-${kind}-${r}-${w}`, until)));
  const rate = counts.reduce((a, b) => a + b, 0) / seconds;
  console.log(JSON.stringify({ round: r, kind, workers, seconds, pairs_per_s: Math.round(rate) }));
  return rate;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rates = { fetch: [], client: [] };
await round("warmup", bare, 0);
for (let r = 1; r <= rounds; r++) {
  // Alternate which goes first, so neither always runs on a warmer server.
  const order = r % 2 ? ["fetch", "client"] : ["client", "fetch"];
  for (const kind of order) rates[kind].push(await round(kind, kind === "fetch" ? bare : client, r));
}
const ratios = rates.client.map((c, i) => c / rates.fetch[i]);
console.log(
  JSON.stringify({
    fetch_median: Math.round(median(rates.fetch)),
    client_median: Math.round(median(rates.client)),
    client_over_fetch_per_round: ratios.map((x) => Number(x.toFixed(3))),
    client_over_fetch_median: Number(median(ratios).toFixed(3)),
  }),
);
await server.stop();
