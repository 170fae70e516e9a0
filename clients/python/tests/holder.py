"""Holds a lock and reports whether it was lost: prints "fence N" once held,
then "lost" (exit 3) or "kept" (exit 0). argv: URL NAME TTL_MS"""

import sys

from tollgate_client import Client

url, name, ttl_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
with Client(url) as client:
    with client.lock(name, ttl_ms=ttl_ms) as lease:
        print(f"fence {lease.fence}", flush=True)
        lost = lease.lost.wait(timeout=15)
        print("lost" if lost else "kept", flush=True)
sys.exit(3 if lost else 0)
