"""Print the IP address of every alive node of a running Ray cluster, one per line.

``python -m fgrpo_verl.launch.ray_nodes --address HOST:PORT`` is what ``slurm/ray_cluster.sh`` polls while it
waits for the allocated nodes to join. It asks the cluster's GCS directly instead of connecting a driver
(``ray.init``), which costs seconds per poll and would itself need a node to attach to.
"""

from __future__ import annotations

import argparse
import sys


def alive_node_ips(address: str, timeout_s: float = 10.0) -> list[str]:
    """IPs of the alive nodes registered with the GCS at ``address`` (token auth from the environment)."""
    from ray._raylet import GcsClient

    client = GcsClient(address=address)
    nodes = client.get_all_node_info(timeout=timeout_s)
    # state 0 = ALIVE in Ray's GcsNodeInfo protobuf
    return sorted({info.node_manager_address for info in nodes.values() if info.state == 0})


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
