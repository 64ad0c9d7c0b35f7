"""Driver run inside a Slurm job by tests/test_slurm_on_cpu.py: one task pinned to every Ray node.

Prints one JSON line: the cluster's alive node IPs and, per node, the IP and Slurm node name that a task
scheduled there saw. Connects through RAY_ADDRESS (exported by slurm/ray_cluster.sh).
"""

import json
import os
import socket

import ray


@ray.remote(num_cpus=1)
def where() -> dict:
    return {"ip": ray.util.get_node_ip_address(), "slurmd": os.environ.get("SLURMD_NODENAME"), "host": socket.gethostname()}


def main() -> None:
    ray.init(address=os.environ["RAY_ADDRESS"], _node_ip_address=os.environ["FGRPO_HEAD_IP"], logging_level="ERROR")
    nodes = [n for n in ray.nodes() if n["Alive"]]
    refs = [
        where.options(scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
        for n in nodes
    ]
    cpus = ray.cluster_resources().get("CPU")
    tasks = ray.get(refs, timeout=120)
    print("PROBE " + json.dumps({"alive_ips": sorted(n["NodeManagerAddress"] for n in nodes), "tasks": tasks, "cpus": cpus}), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
