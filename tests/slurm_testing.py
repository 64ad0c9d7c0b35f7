"""Shared helpers of the Slurm tests: a real two-node Slurm cluster (scripts/slurm_cluster.sh) per session
(the ``slurm_cluster`` fixture of tests/conftest.py), handed to each module by :func:`module_cluster`.

The cluster needs root and Debian's slurmctld/slurmd/slurm-client/munge packages (`make slurm-deps` installs
them as root). Elsewhere every Slurm test is skipped with the reason spelled out.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLUSTER_SCRIPT = REPO / "scripts" / "slurm_cluster.sh"
VENV_BIN = Path(sys.executable).parent


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "SLURM TESTS SKIPPED: not root (slurmd must start jobs as their user); run `make test` as root"
    missing = [b for b in ("slurmctld", "slurmd", "sbatch", "munged") if not (shutil.which(b) or Path(f"/usr/sbin/{b}").exists())]
    if missing:
        return (
            f"SLURM TESTS SKIPPED: {missing} not installed; as root: "
            "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge (or `make slurm-deps`)"
        )
    return None


def job_environment(slurm_conf: Path) -> dict[str, str]:
    """Environment for sbatch: jobs inherit it (sbatch exports ALL), so they find this venv and this checkout."""
    env = dict(os.environ)
    env["SLURM_CONF"] = str(slurm_conf)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    # nothing a job starts may phone home or reach past loopback
    env["WANDB_MODE"] = "offline"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_TOKEN", None)
    # both test nodes are this machine, at 127.0.0.2 / 127.0.0.3: loopback is right here, and only here
    env["FGRPO_ALLOW_LOOPBACK"] = "1"
    return env


class SlurmCluster:
    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.conf = state_dir / "slurm.conf"
        self.script_env = dict(os.environ, FGRPO_SLURM_DIR=str(state_dir))

    def up(self) -> None:
        subprocess.run([str(CLUSTER_SCRIPT), "up"], env=self.script_env, check=True, timeout=120)

    def down(self) -> None:
        subprocess.run([str(CLUSTER_SCRIPT), "down"], env=self.script_env, check=False, timeout=60)

    @property
    def env(self) -> dict[str, str]:
        return job_environment(self.conf)

    def sbatch(self, script: Path, *script_args: str, options=(), env: dict | None = None, cwd: Path | None = None) -> str:
        """Submit ``script`` (sbatch ``options`` before it, ``script_args`` after it); returns the job id."""
        out = subprocess.run(
            ["sbatch", "--parsable", *options, str(script), *script_args],
            env=env or self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, f"sbatch failed: {out.stderr}"
        return out.stdout.strip().split(";")[0]

    def cancel_all(self, timeout: float = 90) -> None:
        """Cancel every job of this user and wait until the queue is empty."""
        subprocess.run(["scancel", "--full", f"--user={os.geteuid()}"], env=self.env, check=False, capture_output=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            queue = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True, text=True)
            if queue.returncode == 0 and not queue.stdout.strip():
                return
            time.sleep(0.5)

    def node_states(self) -> dict[str, str]:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env, capture_output=True, text=True)
        return dict(line.split(None, 1) for line in out.stdout.splitlines() if line.strip())

    def ensure_idle(self, timeout: float = 60) -> None:
        """Every node idle, as on a fresh cluster: a node an earlier module's kill left drained or down is resumed;
        one that does not come back fails the module with the states seen (instead of its jobs waiting forever)."""
        for node, state in self.node_states().items():
            if any(word in state for word in ("drain", "down", "fail")):
                subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], env=self.env,
                               capture_output=True, check=False)
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if states and all(state.startswith("idle") for state in states.values()):
                return
            if time.monotonic() > deadline:
                pytest.fail(f"the session's Slurm nodes are not idle before this module: {states}")
            time.sleep(0.5)

    def job_field(self, job_id: str, field: str) -> str | None:
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=self.env, capture_output=True, text=True)
        match = re.search(rf"\b{field}=(\S+)", out.stdout)
        return match.group(1) if match else None

    def allocated_memory_mb(self, job_id: str) -> int | None:
        """The memory Slurm allocated to the job on each node (``mem=`` of its ``TRES``), in MB."""
        match = re.search(r"(?:^|,)mem=([\d.]+)([KMGT])", self.job_field(job_id, "TRES") or "")
        return None if match is None else round(float(match[1]) * {"K": 2**-10, "M": 1, "G": 2**10, "T": 2**20}[match[2]])

    def node_memory_mb(self) -> int:
        """A test node's memory (``RealMemory``; both advertise the same): what ``--mem=0`` is allocated."""
        out = subprocess.run(["scontrol", "-o", "show", "node", "n1"], env=self.env, capture_output=True, text=True)
        return int(re.search(r"\bRealMemory=(\d+)", out.stdout).group(1))

    def assert_memory_asked(self, job_id: str, expected_mb: int | None = None) -> None:
        """The job was allocated ``expected_mb`` per node (default: all of a node, a training job's ``--mem=0``),
        not the cluster's ``DefMemPerCPU`` share that a job asking for no memory gets."""
        expected = self.node_memory_mb() if expected_mb is None else expected_mb
        assert self.allocated_memory_mb(job_id) == expected, (job_id, self.job_field(job_id, "TRES"), expected)

    def wait_state(self, job_id: str, states: set[str], timeout: float) -> str:
        """Poll until the job's state is one of ``states``; fail on timeout with the last state seen."""
        deadline, state = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            state = self.job_field(job_id, "JobState")
            if state in states:
                return state
            time.sleep(1)
        pytest.fail(f"job {job_id} not in {states} after {timeout} s (last state {state})")

    def wait_done(self, job_id: str, timeout: float) -> str:
        return self.wait_state(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}, timeout)


def steps_per_start(log: str) -> list[list[int]]:
    """Global steps logged on the console (verl's `step:N - ...` lines), split at each start of the job script."""
    starts: list[list[int]] = []
    for line in log.splitlines():
        if re.search(r"\[fgrpo\] job \d+ run \S+ start \d+", line):
            starts.append([])
        match = re.search(r"\bstep:(\d+) - ", line)
        if match and starts:
            starts[-1].append(int(match.group(1)))
    return starts


def processes_matching(text: str) -> list[str]:
    """Command lines of live processes containing ``text`` (to prove a job left nothing behind)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def wait_no_processes(text: str, timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = processes_matching(text)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def cluster_or_skip():
    """Generator for the session's cluster fixture: a fresh two-node cluster, torn down at the end."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    # munged runs as user munge, which cannot enter pytest's private (0700) tmp directories
    state_dir = Path(tempfile.mkdtemp(prefix="fgrpo-slurm-", dir="/tmp"))
    state_dir.chmod(0o755)
    cluster = SlurmCluster(state_dir)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def module_cluster(cluster: SlurmCluster):
    """Generator for a module-scoped fixture over the session's cluster: the jobs a module leaves (a failed test's
    among them) are cancelled and gone before the next module runs, and every node is idle when a module starts
    (resumed if an earlier module's kill left it drained), so each module starts as on a fresh cluster."""
    cluster.ensure_idle()
    try:
        yield cluster
    finally:
        cluster.cancel_all()
