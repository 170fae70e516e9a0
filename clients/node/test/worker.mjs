// A worker whose handler never finishes: the test kills this process
// mid-job.
import { Tollgate } from "../dist/index.js";

const tg = new Tollgate(process.env.TOLLGATE_URL);
tg.worker(
  process.env.QUEUE,
  async (payload, job) => {
    console.log(`running ${job.id} ${job.attempt}`);
    await new Promise(() => {});
  },
  { leaseMs: Number(process.env.LEASE_MS), waitMs: 1000 },
);
