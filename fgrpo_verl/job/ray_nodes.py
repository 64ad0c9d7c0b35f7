"""Print the IP address of every alive node of a running Ray cluster, one per line.

``python -m fgrpo_verl.job.ray_nodes --address HOST:PORT`` is what ``slurm/ray_cluster.sh`` polls while it waits
for the allocated nodes to join: a driver connects with Ray's public ``ray.init(address=...)`` (to the Ray node of
this host, which is the head's in a job), reads ``ray.nodes()`` and leaves; about a second a poll. A GCS that is
not listening yet is waited for with plain TCP connects, for at most ``--timeout``: ``ray.init`` itself would wait
for it for over a minute. Ray's token comes from the environment (``RAY_AUTH_TOKEN``), as for every driver.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time


def alive_node_ips(address: str, timeout_s: float = 10.0) -> list[str]:
    """IPs of the alive nodes of the Ray cluster whose GCS is at ``address``; OSError when nothing listens there
    within ``timeout_s`` (a head still starting gets that long)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
            break
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
    import ray

    ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    try:
        return sorted({node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]})
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="GCS address of the head node, HOST:PORT")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the GCS to answer")
    args = parser.parse_args(argv)
    for ip in alive_node_ips(args.address, args.timeout):
        print(ip)
    return 0


if __name__ == "__main__":
    sys.exit(main())
