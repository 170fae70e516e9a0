// BullMQ's open-source global rate limit (the Worker's `limiter` option),
// measured as `tollgate bench jobs --queue-rate` measures tollgate's: a
// backlog, a worker of concurrency 50, jobs started per second over
// SECONDS after the first period, and the most started in any one period.
// Run by scripts/peers/rate_side_by_side.sh (which installs BullMQ from
// ../shared/peers/node's lock file). Env: PEERS_REDIS_PORT, RATE_MAX
// (1000), RATE_MS (1000), SECONDS (10).
import Redis from 'ioredis';
import { Queue, Worker } from 'bullmq';

const port = Number(process.env.PEERS_REDIS_PORT || 6391);
const MAX = Number(process.env.RATE_MAX || 1000);
const PERIOD = Number(process.env.RATE_MS || 1000);
const SECONDS = Number(process.env.SECONDS || 10);
const connection = { host: '127.0.0.1', port, maxRetriesPerRequest: null };
const name = `limiter-${process.pid}`;

const queue = new Queue(name, { connection });
await queue.obliterate({ force: true });
const backlog = Math.ceil((MAX / PERIOD) * 1000 * (SECONDS + 3 * PERIOD / 1000)) + 1000;
for (let i = 0; i < backlog; i += 500) {
  await queue.addBulk(
    Array.from({ length: Math.min(500, backlog - i) }, (_, j) => ({
      name: 'noop',
      data: { i: i + j },
      opts: { removeOnComplete: true, removeOnFail: true },
    })),
  );
}
const started = [];
const worker = new Worker(name, async () => {
  started.push(Date.now());
}, { connection, concurrency: 50, limiter: { max: MAX, duration: PERIOD }, autorun: false });
worker.run();
await new Promise((r) => setTimeout(r, PERIOD + SECONDS * 1000 + 200));
await worker.close(true);
await queue.obliterate({ force: true });
await queue.close();
started.sort((a, b) => a - b);
const from = started[0] + PERIOD;
const to = from + SECONDS * 1000;
const steady = started.filter((t) => t >= from && t < to).length;
let most = 0;
for (let hi = 0, lo = 0; hi < started.length; hi++) {
  while (started[hi] - started[lo] >= PERIOD) lo++;
  most = Math.max(most, hi - lo + 1);
}
const perS = (MAX / PERIOD) * 1000;
console.log(JSON.stringify({
  peer: 'bullmq', case: 'jobs_rate', rate: `${MAX}/${PERIOD}ms`, concurrency: 50, seconds: SECONDS,
  jobs_per_s: Math.round((steady / SECONDS) * 1000) / 1000,
  share_of_rate: Math.round((steady / SECONDS / perS) * 1000) / 1000,
  most_in_one_period: most, limit_per_period: MAX, handed_out: started.length,
  version: JSON.parse((await import('node:fs')).readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url))).version,
}));
const c = new Redis({ host: '127.0.0.1', port });
await c.quit();
