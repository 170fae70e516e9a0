"""Title A held, a second user waits in line for it and is granted the moment
the first releases early, a third gets title B at once. Run against a server:
TOLLGATE_URL=http://127.0.0.1:7700 python examples/seed.py"""

import os
import threading

from tollgate_client import Client, Lease, Ticket

with Client(os.environ.get("TOLLGATE_URL", "http://127.0.0.1:7700")) as client:
    a = client.gate("title-A").enter(capacity=1, ttl_ms=60_000)  # user 1 holds title A
    line = client.gate("title-A").enter(capacity=1, ttl_ms=60_000)  # user 2 joins the line
    assert isinstance(a, Lease) and isinstance(line, Ticket)
    print(f"user 1 holds title A (fence {a.fence}); user 2 waits at position {line.position}")
    b = client.gate("title-B").enter(capacity=1)  # user 3: title B, whatever happens on A
    assert isinstance(b, Lease)
    print(f"user 3 holds title B (fence {b.fence})")
    threading.Timer(0.5, a.release).start()  # user 1 releases early...
    lease = line.granted(timeout=30)  # ...and user 2 is granted that moment
    print(f"user 2 holds title A (fence {lease.fence} > {a.fence})")
    lease.release()
    b.release()
