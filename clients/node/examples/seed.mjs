import { Tollgate } from "tollgate-client";
const tg = new Tollgate(process.env.TOLLGATE_URL ?? "http://127.0.0.1:7700");
const first = await tg.gate("title-A").enter({ capacity: 1, ttlMs: 60_000 }); // granted: holds A for 60 s
const second = await tg.gate("title-A").enter({ capacity: 1 }); // in line for A
console.log("second user waits at position", second.position);
const granted = second.granted(); // long-polls: answered the moment A is free
await first.release(); // the first user is done early
const lease = await granted;
console.log("second user holds title-A, fence", lease.fence > first.fence ? "higher" : "lower");
const third = await tg.gate("title-B").enter({ capacity: 1 }); // B is free: granted at once
console.log("third user holds title-B:", third.status);
await Promise.all([lease.release(), third.release()]);
