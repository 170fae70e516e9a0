// Starts the real servers the tests use: `tollgate serve` (the binary
// built by cargo; TOLLGATE_BIN overrides) on free ports, on the embedded
// store or on a redis-server of its own. Each is killed when the test
// process ends. Nothing already running is used; a missing binary fails.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.TOLLGATE_BIN ?? resolve(here, "../../../target/debug/tollgate");
if (!existsSync(BIN)) throw new Error(`no tollgate binary at ${BIN}: run cargo build -p tollgate-server (or set TOLLGATE_BIN)`);

const children = new Set();
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL");
});

export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, check, ms = 15_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`${what} did not come up`);
    await sleep(50);
  }
}

/** A redis-server of its own, in a temp dir. */
export async function startRedis() {
  const which = spawnSync("redis-server", ["--version"]);
  if (which.error) throw new Error("redis-server is not installed (scripts/test installs it)");
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "tollgate-node-redis-"));
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
    stdio: "ignore",
  });
  children.add(child);
  const url = `redis://127.0.0.1:${port}`;
  await until("redis-server", async () => spawnSync("redis-cli", ["-p", String(port), "ping"]).stdout?.toString().includes("PONG"));
  return {
    url,
    stop() {
      child.kill("SIGKILL");
      children.delete(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `tollgate serve` on a free port (or `port`); `redis`: its URL. */
export async function startServer({ redis, port, args = [] } = {}) {
  port ??= await freePort();
  const proxy = await freePort();
  const argv = ["serve", "--listen", `127.0.0.1:${port}`, "--proxy-listen", `127.0.0.1:${proxy}`, ...args];
  if (redis) argv.push("--redis", redis);
  // The embedded store keeps its log in a directory of its own.
  const data = mkdtempSync(join(tmpdir(), "tollgate-data-"));
  if (!args.includes("--data-dir")) argv.push("--data-dir", data);
  const child = spawn(BIN, argv, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, TOLLGATE_LOG: "warn" } });
  children.add(child);
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const url = `http://127.0.0.1:${port}`;
  try {
    await until("tollgate serve", async () => (await fetch(`${url}/readyz`)).ok);
  } catch (e) {
    child.kill("SIGKILL");
    throw new Error(`${e.message}: ${stderr}`);
  }
  return {
    url,
    port,
    /** The waiting rooms' address. */
    proxyUrl: `http://127.0.0.1:${proxy}`,
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once("exit", r));
        child.kill("SIGKILL");
        await exited;
      }
      children.delete(child);
      rmSync(data, { recursive: true, force: true });
    },
  };
}

/** Runs `script` (a file in test/) with node, TOLLGATE_URL set. */
export function runScript(script, env) {
  const child = spawn(process.execPath, [join(here, script)], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  children.add(child);
  child.on("exit", () => children.delete(child));
  const lines = [];
  const waiters = [];
  let buffer = "";
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  child.stdout.on("data", (d) => {
    buffer += d;
    let i;
    while ((i = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 1);
      lines.push(line);
      for (const w of [...waiters]) if (w.test(line)) w.ok(line);
    }
  });
  return {
    child,
    lines,
    stderr: () => err,
    /** The first line (past or future) that matches `re`. */
    line(re, ms = 15_000) {
      const seen = lines.find((l) => re.test(l));
      if (seen) return Promise.resolve(seen);
      return new Promise((ok, fail) => {
        const w = { test: (l) => re.test(l), ok: (l) => { clearTimeout(t); waiters.splice(waiters.indexOf(w), 1); ok(l); } };
        const t = setTimeout(() => fail(new Error(`no line like ${re} from ${script}: ${lines.join("|")} ${err}`)), ms);
        waiters.push(w);
      });
    },
  };
}
