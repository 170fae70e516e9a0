// Holds a lock with a short lease and says what happens to it: the test
// freezes this process past the lease and wakes it again.
import { Tollgate } from "../dist/index.js";

const tg = new Tollgate(process.env.TOLLGATE_URL);
await tg.withLock(
  process.env.LOCK,
  async (signal, lease) => {
    console.log(`held ${lease.fence}`);
    await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    console.log(`lost ${signal.reason.code}`);
  },
  { ttlMs: Number(process.env.TTL_MS) },
);
console.log("done");
