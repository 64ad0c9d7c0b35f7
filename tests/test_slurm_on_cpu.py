"""Real Slurm (scripts/slurm_cluster.sh: munged, slurmctld, two slurmd on 127.0.0.2 / 127.0.0.3) running the
job library slurm/ray_cluster.sh: one Ray cluster over every allocated node, token auth on, and a clear,
bounded failure when a node never joins."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

import pytest
from slurm_testing import REPO, module_cluster, skip_reason, wait_no_processes

pytestmark = [pytest.mark.slurm, pytest.mark.ray]

_SKIP = skip_reason()
if _SKIP:
    print(f"\n*** {_SKIP} ***\n")


# the join check's timeout in the hanging-worker case: short, since only the node that never joins must miss it
JOIN_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def slurm(slurm_cluster):
    yield from module_cluster(slurm_cluster)


def _job_script(path: Path, body: str, nodes: int) -> Path:
    path.write_text(
        f"""#!/bin/bash
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --output={path.parent}/%x-%j.out
set -euo pipefail
export FGRPO_GPUS_PER_NODE=0
# a failed job's Ray logs go here (default: the submit directory, i.e. the checkout)
export FGRPO_LOG_DIR={path.parent}
source {REPO}/slurm/ray_cluster.sh
{body}
"""
    )
    return path


@pytest.mark.timeout(300)
def test_two_node_job_forms_one_ray_cluster_and_runs_work_on_each_node(slurm, tmp_path):
    """(b) Head on n1 (127.0.0.2), worker on n2 (127.0.0.3) joined by srun --overlap; a driver places one task on
    each node. Token auth is on: a client without the job's token is rejected, and the token is in no command
    line, no Ray session file and not in the job log."""
    log = tmp_path / "probe.out"
    script = _job_script(
        tmp_path / "probe.sbatch",
        f"""fgrpo_ray_up
python {REPO}/tests/slurm_jobs/ray_probe.py
if env -u RAY_AUTH_TOKEN python -m fgrpo_verl.job.node_net alive --address "$RAY_ADDRESS" --timeout 5 >/dev/null 2>&1; then
    echo "AUTH without token: accepted"
else
    echo "AUTH without token: rejected"
fi
echo "TOKEN length ${{#RAY_AUTH_TOKEN}}"
echo "TOKEN from the submitting shell reused: $([[ $RAY_AUTH_TOKEN == shell-token-0123 ]] && echo yes || echo no)"
echo "SESSION DIR mode $(stat -c %a "$FGRPO_RAY_SESSION_DIR") owner $(stat -c %u "$FGRPO_RAY_SESSION_DIR")"
# the pattern goes to grep through a pipe: on grep's own command line it would find itself
echo "TOKEN in command lines: $(printf '%s' "$RAY_AUTH_TOKEN" | grep -lsFf - /proc/[0-9]*/cmdline | wc -l)"
echo "TOKEN in Ray session files: $(printf '%s' "$RAY_AUTH_TOKEN" | grep -rlsFf - "$FGRPO_RAY_SESSION_DIR" | wc -l)"
echo "TOKEN in this log: $(printf '%s' "$RAY_AUTH_TOKEN" | grep -csFf - {log})"
""",
        nodes=2,
    )
    start = time.monotonic()
    # a token in the submitting shell (shared with who knows what) must not become the job's
    job = slurm.sbatch(script, options=["--output", str(log)], env=dict(slurm.env, RAY_AUTH_TOKEN="shell-token-0123"))
    state = slurm.wait_done(job, timeout=240)
    wall = time.monotonic() - start
    text = log.read_text()
    assert state == "COMPLETED", f"job {job} ended {state}:\n{text[-4000:]}"
    probe = json.loads(re.search(r"^PROBE (.*)$", text, re.M).group(1))
    assert probe["alive_ips"] == ["127.0.0.2", "127.0.0.3"]
    assert sorted((t["ip"], t["slurmd"]) for t in probe["tasks"]) == [("127.0.0.2", "n1"), ("127.0.0.3", "n2")]
    assert "AUTH without token: rejected" in text
    assert "TOKEN length 64" in text and "TOKEN from the submitting shell reused: no" in text
    assert f"SESSION DIR mode 700 owner {os.geteuid()}" in text
    # Ray offers each node exactly the CPUs of its Ray step (--cpus-per-task=2), not the node's
    assert probe["cpus"] == 4.0
    assert "TOKEN in command lines: 0" in text
    assert "TOKEN in Ray session files: 0" in text
    assert "TOKEN in this log: 0" in text
    assert "all 2 node(s) joined the Ray cluster" in text
    # Ray stopped with the job: no process of this job's Ray session is left.
    assert wait_no_processes(f"fgrpo-ray-{job}") == []
    print(f"2-node Ray job {job}: {wall:.1f} s wall")


def _ray_wrapper(tmp_path: Path, on_n2: str) -> Path:
    """FGRPO_RAY_CMD that behaves like a broken node on n2 (``on_n2``) and runs Ray elsewhere."""
    wrapper = tmp_path / "ray_wrapper.sh"
    wrapper.write_text(f'#!/bin/bash\nif [[ $SLURMD_NODENAME == n2 ]]; then {on_n2}; fi\nexec ray "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "broken, expected",
    [
        # a raylet that never registers (hangs): caught by the join timeout, JOIN_TIMEOUT_S (the head comes up in
        # 5-10 s; under load it may not be up by then either: then it is named too)
        ("exec sleep 600", r"node\(s\) (n1 \(127\.0\.0\.2\) )?n2 \(127\.0\.0\.3\) did not join the Ray cluster at "
                           rf"127\.0\.0\.2:\d+ within {JOIN_TIMEOUT_S} s"),
        # Ray that cannot start at all: caught as soon as its step exits
        ("echo 'ray: broken install' >&2; exit 3", r"the Ray step on node n2 \(127\.0\.0\.3\) exited with status 3 before joining"),
    ],
    ids=["hangs", "exits"],
)
def test_worker_that_never_joins_fails_the_job_with_a_clear_error(slurm, tmp_path, broken, expected):
    """(d) A worker node that does not join: the job fails (not hangs), naming the node, and leaves no Ray behind."""
    log = tmp_path / "nojoin.out"
    wrapper = _ray_wrapper(tmp_path, broken)
    script = _job_script(
        tmp_path / "nojoin.sbatch",
        f"""export FGRPO_RAY_CMD={wrapper} FGRPO_RAY_JOIN_TIMEOUT={JOIN_TIMEOUT_S} FGRPO_LOG_DIR={tmp_path}
fgrpo_ray_up
echo "UNREACHABLE: the driver started"
""",
        nodes=2,
    )
    start = time.monotonic()
    job = slurm.sbatch(script, options=["--output", str(log)])
    state = slurm.wait_done(job, timeout=200)
    wall = time.monotonic() - start
    text = log.read_text()
    assert state == "FAILED", f"job {job} ended {state}:\n{text[-4000:]}"
    assert re.search(expected, text), text[-4000:]
    assert "UNREACHABLE" not in text
    assert slurm.job_field(job, "ExitCode") != "0:0"
    # bounded, not timed: the job ended (wait_done's limit is a third of the broken node's 600 s hang) because the
    # join check gave up (the message above) or saw the step exit, and the hung step did not outlive the job
    assert wait_no_processes(f"fgrpo-ray-{job}") == []
    assert wait_no_processes(str(wrapper)) == []
    # the failed job's Ray logs were saved from the node-local session dir before it was removed
    assert list((tmp_path / f"ray-{job}-n1" / "logs").glob("gcs_server.*")), sorted(p.name for p in tmp_path.iterdir())
    print(f"no-join job {job} ({broken}): failed after {wall:.1f} s wall")


@pytest.mark.timeout(120)
def test_multi_node_job_refuses_a_loopback_head_address(slurm, tmp_path):
    """Both test nodes are 127.0.0.x: outside a one-machine cluster (FGRPO_ALLOW_LOOPBACK unset) the job must
    refuse to start Ray rather than let every worker dial its own loopback."""
    log = tmp_path / "loopback.out"
    script = _job_script(tmp_path / "loopback.sbatch", "unset FGRPO_ALLOW_LOOPBACK\nfgrpo_ray_up\necho UNREACHABLE\n", nodes=2)
    job = slurm.sbatch(script, options=["--output", str(log)])
    assert slurm.wait_done(job, timeout=90) == "FAILED"
    text = log.read_text()
    assert "head node n1 resolves to the loopback address 127.0.0.2" in text and "UNREACHABLE" not in text
