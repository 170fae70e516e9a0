"""A worker whose handler never finishes: prints "started ID ATTEMPT" and
hangs, for the test to kill it mid-job. argv: URL QUEUE LEASE_MS"""

import sys
import time

from tollgate_client import Client, Delivery


def handler(job: Delivery) -> None:
    print(f"started {job.id} {job.attempt}", flush=True)
    time.sleep(60)


with Client(sys.argv[1]) as client:
    client.worker(sys.argv[2], handler, lease_ms=int(sys.argv[3])).run()
