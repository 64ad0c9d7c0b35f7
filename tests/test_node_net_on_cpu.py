"""Which socket interfaces a job pins for verl's process groups (``fgrpo_verl/job/node_net.py``,
``slurm/ray_cluster.sh``).

Gloo is pinned to the interface of the node's Ray address (it would pick loopback where the host name maps to
127.0.1.1). NCCL is left to choose its own interface: Slurm's NodeAddr is often the management network, and
pinning NCCL there sends every FSDP all-gather of a TCP-only cluster over that slow link. A site's own
``NCCL_SOCKET_IFNAME`` is passed through unchanged.
"""

from __future__ import annotations

import os
import subprocess
import sys

from test_job_scripts_on_cpu import _job, _tools, _workdir

from fgrpo_verl.job import node_net


def test_gloo_is_pinned_and_nccl_left_to_choose():
    assert node_net.interface_env("127.0.0.1", environ={}) == {"GLOO_SOCKET_IFNAME": "lo"}


def test_values_of_the_site_are_kept():
    env = {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "ib0"}
    assert node_net.interface_env("127.0.0.1", environ=env) == env
    assert node_net.interface_env("127.0.0.1", environ={"NCCL_SOCKET_IFNAME": "=ib0"}) == {
        "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "=ib0"}


def _exec_env(**env) -> str:
    full = {k: v for k, v in os.environ.items() if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    full.update(env)
    # node_net appends the node's port flags to the command: the shell gets them as $1..$6 and ignores them
    done = subprocess.run(
        [sys.executable, "-m", "fgrpo_verl.job.node_net", "exec", "--ip", "127.0.0.1", "--base", "20000",
         "--index", "0", "--", "sh", "-c", 'echo "GLOO=${GLOO_SOCKET_IFNAME-unset} NCCL=${NCCL_SOCKET_IFNAME-unset}"',
         "sh"], env=full, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_the_ray_process_inherits_gloo_only():
    assert _exec_env() == "GLOO=lo NCCL=unset"
    assert _exec_env(NCCL_SOCKET_IFNAME="ib0") == "GLOO=lo NCCL=ib0"


def test_a_job_pins_gloo_for_ray_and_the_driver_but_not_nccl(tmp_path):
    _tools(tmp_path)
    work, overrides = _workdir(tmp_path)
    done, log = _job(tmp_path, work, [*overrides, "actor_rollout_ref.rollout.tensor_model_parallel_size=1"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ray_env = [line for line in log if line.startswith("RAYENV")]
    assert ray_env and all(line.startswith("RAYENV GLOO=lo NCCL=unset ") for line in ray_env), ray_env
    assert "TRAINENV GLOO=lo NCCL=unset" in log
