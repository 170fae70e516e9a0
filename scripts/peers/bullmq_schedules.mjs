// BullMQ's job schedulers, measured the way `tollgate bench schedules` measures
// tollgate's schedules. Prints one JSON line.
//
// Creates PEERS_SCHEDULES (10000) job schedulers with
// queue.upsertJobScheduler(id, {every: PEERS_EVERY_MS (10000), startDate}, template),
// their ticks spread over the interval's whole seconds as tollgate's bench
// does (scheduler i ticks at k*every + (i % (every/1000))*1000, so with the
// defaults 1,000 schedulers per whole second). BullMQ's `offset` cannot say
// "phase 0" (offset 0 means "no offset": the first job is due at once and the
// phase is wherever creation happened), so every scheduler gets a
// `startDate` instead: its first tick after the set-up; BullMQ then keeps
// that phase (next = previous + every). Then starts PEERS_WORKERS (3) child
// processes, each one BullMQ Worker with concurrency PEERS_CONCURRENCY (16)
// and a no-op processor, and checks every tick of a PEERS_WINDOW_S (30) s
// window was processed exactly once.
//
// How BullMQ fires: upsertJobScheduler stores the scheduler (a hash
// bull:<q>:repeat:<id> and a member of the ZSET bull:<q>:repeat) and adds its
// first job at once, as a delayed job (hash bull:<q>:repeat:<id>:<millis>,
// member of bull:<q>:delayed). There is no firer: a worker that takes a
// scheduler's job (moveToActive) adds the next one (updateJobScheduler)
// before calling the processor. So the next tick exists only once the
// previous job has been taken by a worker; with no worker for more than an
// interval, the ticks in between are skipped (the next is re-aligned to the
// future), not fired late.
//
// Tick time: the job id is repeat:<schedulerId>:<nextMillis>, nextMillis
// being the tick the job is for; it is also job.timestamp + job.opts.delay
// (timestamp = when the job was added, delay = tick - then, unless clamped to
// 0 because the tick had passed). job.opts.prevMillis is not usable for
// `every` schedulers: the worker computes the next tick in Lua, and the
// prevMillis the client puts in the job's options is not that tick. The
// latency is processor start (Date.now() in the processor) - tick.
//
// Env: PEERS_REDIS_PORT (6391), PEERS_SCHEDULES, PEERS_EVERY_MS,
// PEERS_WINDOW_S, PEERS_WORKERS, PEERS_CONCURRENCY.
import { readFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import Redis from 'ioredis';
import { Queue, Worker } from 'bullmq';

const PORT = Number(process.env.PEERS_REDIS_PORT || 6391);
const REDIS = { host: '127.0.0.1', port: PORT };
const connection = { ...REDIS, maxRetriesPerRequest: null };
const N = Number(process.env.PEERS_SCHEDULES || 10000);
const EVERY = Number(process.env.PEERS_EVERY_MS || 10000);
const WINDOW_MS = Math.round(Number(process.env.PEERS_WINDOW_S || 30) * 1000);
const WORKERS = Number(process.env.PEERS_WORKERS || 3);
const CONCURRENCY = Number(process.env.PEERS_CONCURRENCY || 16);
const MARGIN_MS = 3000; // workers keep running this long after the window
const round = (x, d = 3) => (x == null ? null : Math.round(x * 10 ** d) / 10 ** d);
const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

function version(pkg) {
  const url = new URL(`./node_modules/${pkg}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version.replace(/^v/, '');
}

// Nearest-rank percentile of an ascending-sorted array.
function pct(sorted, p) {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

async function redisCpu(client) {
  const info = await client.info('cpu');
  const get = (k) => Number((info.match(new RegExp(`${k}:([0-9.]+)`)) || [])[1] || 0);
  return get('used_cpu_user') + get('used_cpu_sys');
}

async function usedMemory(client) {
  const info = await client.info('memory');
  return Number((info.match(/used_memory:(\d+)/) || [])[1] || 0);
}

// Sum of MEMORY USAGE <key> SAMPLES 0 over the keys matching `pattern`,
// grouped by `classify(key)`.
async function memoryByClass(client, pattern, classify) {
  const keys = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    keys.push(...batch);
  } while (cursor !== '0');
  const sums = {};
  const counts = {};
  for (let i = 0; i < keys.length; i += 1000) {
    const chunk = keys.slice(i, i + 1000);
    const p = client.pipeline();
    for (const k of chunk) p.call('MEMORY', 'USAGE', k, 'SAMPLES', '0');
    const res = await p.exec();
    chunk.forEach((k, j) => {
      const c = classify(k);
      sums[c] = (sums[c] || 0) + Number(res[j][1] || 0);
      counts[c] = (counts[c] || 0) + 1;
    });
  }
  return { sums, counts };
}

// ---------------------------------------------------------------- child
async function child() {
  const { queue, windowStart, windowEnd, until } = JSON.parse(process.env.PEERS_CHILD);
  const seen = []; // every tick processed: "id@tick"
  const late = []; // processor start - tick, for the window's ticks
  let otherJobs = 0;
  const worker = new Worker(
    queue,
    async (job) => {
      const started = Date.now();
      const m = /^repeat:(.+):(\d+)$/.exec(job.id);
      if (!m) {
        otherJobs++;
        return;
      }
      const tick = Number(m[2]);
      seen.push(`${m[1]}@${tick}`);
      if (tick >= windowStart && tick <= windowEnd) late.push(started - tick);
    },
    { connection, concurrency: CONCURRENCY, autorun: true },
  );
  let errors = 0;
  worker.on('error', () => errors++);
  worker.on('failed', () => errors++);
  await worker.waitUntilReady();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let cpuW0 = null;
  let cpuWin = null;
  await sleep(windowStart - Date.now());
  cpuW0 = process.cpuUsage();
  await sleep(windowEnd - Date.now());
  const d = process.cpuUsage(cpuW0);
  cpuWin = (d.user + d.system) / 1e6;
  await sleep(until - Date.now());
  const cpu = process.cpuUsage(cpu0);
  const wallS = (performance.now() - t0) / 1000;
  await worker.close();
  // Exit only once the (large) line is flushed: a pipe is written to
  // asynchronously, and process.exit() would cut it.
  process.stdout.write(
    JSON.stringify({
      seen,
      late,
      errors,
      other_jobs: otherJobs,
      cpu_s: (cpu.user + cpu.system) / 1e6,
      wall_s: wallS,
      cpu_s_in_window: cpuWin,
    }) + '\n',
    () => process.exit(0),
  );
}

// ---------------------------------------------------------------- lead
async function lead() {
  if (N < 1 || EVERY < 1000 || EVERY % 1000 !== 0 || WORKERS < 1) {
    console.error('bullmq_schedules: needs PEERS_SCHEDULES >= 1, PEERS_EVERY_MS a multiple of 1000, PEERS_WORKERS >= 1');
    process.exit(64);
  }
  const everyS = EVERY / 1000;
  const client = new Redis(REDIS);
  const run = (Date.now() % 1e9).toString(36);
  const queueName = `sched-${run}`;
  const queue = new Queue(queueName, { connection });
  await queue.waitUntilReady();
  const template = { name: 'tick', data: {}, opts: { removeOnComplete: true, removeOnFail: true } };

  // First ticks: the first whole interval far enough ahead for creating them
  // all; the window starts one interval later (so every scheduler has fired
  // once and the workers are warm, as tollgate's schedules fire before its
  // window too), and is checked for WINDOW_MS.
  const setupMs = 8000 + Math.ceil(N / 1000) * 1000;
  const firstBase = Math.ceil((Date.now() + setupMs) / EVERY) * EVERY;
  const windowStart = firstBase + EVERY;
  const windowEnd = windowStart + WINDOW_MS;
  const anchor = (i) => (i % everyS) * 1000;

  const mem0 = await usedMemory(client);
  const created = performance.now();
  let next = 0;
  let createErrors = 0;
  await Promise.all(
    Array.from({ length: 64 }, async () => {
      while (next < N) {
        const i = next++;
        try {
          await queue.upsertJobScheduler(`s${i}`, { every: EVERY, startDate: firstBase + anchor(i) }, template);
        } catch (e) {
          if (createErrors++ === 0) console.error(`bullmq_schedules: upsertJobScheduler: ${e.message}`);
        }
      }
    }),
  );
  const createS = (performance.now() - created) / 1000;

  // Idle: created, none fired yet. Each scheduler has a hash, a ZSET member,
  // and its next job waiting as a delayed job (hash + ZSET member).
  const prefix = `bull:${queueName}:`;
  const classify = (k) => {
    const rest = k.slice(prefix.length);
    if (rest === 'repeat') return 'repeat_zset';
    if (rest === 'delayed') return 'delayed_zset';
    if (/^repeat:[^:]+$/.test(rest)) return 'scheduler_hash';
    if (/^repeat:[^:]+:\d+$/.test(rest)) return 'next_job_hash';
    return rest;
  };
  const idle = await memoryByClass(client, `${prefix}*`, classify);
  const mem1 = await usedMemory(client);
  const counts0 = await queue.getJobCounts('delayed', 'wait', 'active', 'completed', 'failed');
  if (Date.now() + 1000 > firstBase) {
    console.error(`bullmq_schedules: creating ${N} schedulers took ${createS.toFixed(1)} s, past the first tick; use fewer`);
    process.exit(70);
  }

  // Workers: child processes, from now to the window's end plus a margin.
  const until = windowEnd + MARGIN_MS;
  const self = fileURLToPath(import.meta.url);
  const children = Array.from({ length: WORKERS }, () => {
    const c = spawn(process.execPath, [self], {
      env: { ...process.env, PEERS_CHILD: JSON.stringify({ queue: queueName, windowStart, windowEnd, until }) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    c.stdout.on('data', (d) => (out += d));
    return new Promise((resolve) => c.on('exit', (code) => resolve({ code, out })));
  });

  await sleep(windowStart - Date.now());
  const r0 = await redisCpu(client);
  await sleep(windowEnd - Date.now());
  const r1 = await redisCpu(client);
  const redisCpuPct = (100 * (r1 - r0)) / (WINDOW_MS / 1000);

  const outs = await Promise.all(children);
  const hist = await memoryByClass(client, `${prefix}*`, classify);
  const countsEnd = await queue.getJobCounts('delayed', 'wait', 'active', 'completed', 'failed');

  const expected = new Set();
  for (let i = 0; i < N; i++) {
    for (let t = windowStart + anchor(i); t <= windowEnd; t += EVERY) expected.add(`s${i}@${t}`);
  }
  const seen = new Set();
  let processedTotal = 0;
  let errors = createErrors;
  const late = [];
  const workers = [];
  let failedChildren = 0;
  for (const { code, out } of outs) {
    let v;
    try {
      v = JSON.parse(out.trim().split('\n').pop());
    } catch {
      console.error(`bullmq_schedules: a worker process (exit ${code}) printed no report (${out.length} bytes)`);
      failedChildren++;
      continue;
    }
    if (code !== 0) failedChildren++;
    processedTotal += v.seen.length;
    for (const s of v.seen) seen.add(s);
    late.push(...v.late);
    errors += v.errors;
    workers.push({
      jobs: v.seen.length,
      cpu_pct: round((100 * v.cpu_s) / v.wall_s),
      cpu_pct_in_window: round((100 * v.cpu_s_in_window) / (WINDOW_MS / 1000)),
    });
  }
  let inWindow = 0;
  for (const s of seen) if (expected.has(s)) inWindow++;
  const missed = expected.size - inWindow;
  late.sort((a, b) => a - b);
  const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);
  const per = (bytes) => round(bytes / N);
  const schedKeys = ['repeat_zset', 'scheduler_hash', 'next_job_hash', 'delayed_zset'];
  const schedBytes = (m) => schedKeys.reduce((a, k) => a + (m.sums[k] || 0), 0);
  const byKey = (m) => schedKeys.map((k) => ({ key: k, keys: m.counts[k] || 0, bytes: per(m.sums[k] || 0) }));

  console.log(
    JSON.stringify({
      peer: 'bullmq',
      version: version('bullmq'),
      ioredis: version('ioredis'),
      runtime: `node ${process.version}`,
      case: 'schedules',
      schedules: N,
      every_s: everyS,
      ticks_per_s: round(N / everyS),
      phases: 'startDate = first tick of phase (i % every_s) s; offset cannot express phase 0',
      worker_processes: WORKERS,
      concurrency: CONCURRENCY,
      workers,
      failed_worker_processes: failedChildren,
      redis_cpu_pct_in_window: round(redisCpuPct),
      window_s: WINDOW_MS / 1000,
      create_s: round(createS),
      expected_ticks: expected.size,
      processed_ticks: seen.size,
      duplicates: processedTotal - seen.size,
      missed,
      processed_in_window: inWindow,
      errors,
      jobs_left_at_end: countsEnd,
      jobs_at_creation: counts0,
      tick_to_processing_start_ms_p50: round(pct(late, 50)),
      tick_to_processing_start_ms_p99: round(pct(late, 99)),
      tick_to_processing_start_ms_max: round(pct(late, 100)),
      processing_started_in_window: late.length,
      latency_is: 'processor start - tick (tick = millis in job id repeat:<id>:<tick>), ms',
      redis_bytes_per_idle_schedule: per(schedBytes(idle)),
      idle_bytes_per_schedule_by_key: byKey(idle),
      idle_keys: `${prefix}repeat (ZSET), ${prefix}repeat:<id> (HASH), ${prefix}repeat:<id>:<tick> (next job HASH), ${prefix}delayed (ZSET)`,
      other_queue_keys_bytes_idle: sum(Object.fromEntries(Object.entries(idle.sums).filter(([k]) => !schedKeys.includes(k)))),
      other_queue_keys_idle: Object.fromEntries(Object.entries(idle.sums).filter(([k]) => !schedKeys.includes(k))),
      used_memory_delta_per_schedule: per(mem1 - mem0),
      redis_bytes_per_schedule_with_history: per(schedBytes(hist)),
      history_by_key: byKey(hist),
      template_opts: template.opts,
    }),
  );
  await queue.obliterate({ force: true }).catch(() => {});
  await queue.close();
  await client.quit();
  process.exit(missed > 0 || processedTotal !== seen.size || failedChildren > 0 ? 70 : 0);
}

if (process.env.PEERS_CHILD) await child();
else await lead();
