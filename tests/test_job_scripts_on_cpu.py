"""The plain job script ``slurm/train.sbatch`` and the Ray library ``slurm/ray_cluster.sh``, run whole with stand-ins for
Slurm (``srun``, ``scontrol``), Ray (``ray start`` records its arguments and environment, then blocks) and the
trainer (records its command line and environment): what a job passes to Ray and verl, without either.

Failure modes covered:
- the plain sbatch path never saved a checkpoint (verl's trainer.save_freq -1): a requeue restarted at step 0;
- no GLOO_SOCKET_IFNAME: verl's gloo process groups picked their own interface, not the one of the address
  ray_cluster.sh gives Ray (loopback where the host name maps to 127.0.1.1); NCCL keeps its own choice of
  interface unless the user sets NCCL_SOCKET_IFNAME (Slurm's NodeAddr may be a slow management NIC);
- jobs whose ids give the same port block collided on a shared node;
- every rank resolved the model on the Hugging Face Hub (no HF_HUB_OFFLINE);
- the job did not check its config against verl's worker start-up (the preflight) before starting Ray;
- a job logging to W&B online on a node without internet failed only in verl's fit(), after the model loaded;
- a job whose interpreter, launch directory or HF_HOME the node does not see failed later, less clearly.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SRUN = """#!/bin/bash
# srun stand-in: drop srun's options, run the step here
while [[ $# -gt 0 ]]; do case $1 in -w) shift 2;; -*) shift;; *) break;; esac; done
exec "$@"
"""
SCONTROL = """#!/bin/bash
case "$1 $2" in
  "show hostnames") echo n1;;
  "show node") echo "NodeName=$3 NodeAddr=127.0.0.1 State=IDLE";;
  *) exit 0;;
esac
"""
# `ray start --block` stand-in: record, then block until the job stops it
RAY = """#!/bin/bash
{ echo "RAY $*"; echo "RAYENV GLOO=${GLOO_SOCKET_IFNAME:-unset} NCCL=${NCCL_SOCKET_IFNAME:-unset} HF=${HF_HUB_OFFLINE:-unset}"; } >>"$FAKE_LOG"
exec sleep 300
"""
# the job's interpreter: the real one, except for the GCS poll (the node has joined once the Ray stand-in has
# started, as a real GCS answers only then: the head's start goes through node_net's Python start-up first) and the
# trainer (recorded)
PY = """#!/bin/bash
if [[ $1 == -m && $2 == fgrpo_verl.job.node_net && $3 == alive ]]; then
    if grep -q '^RAY ' "$FAKE_LOG" 2>/dev/null; then echo 127.0.0.1; fi
    exit 0
fi
if [[ $1 == -m && $2 == fgrpo_verl && $3 == train ]]; then
    { echo "TRAIN $*"; echo "TRAINENV GLOO=${GLOO_SOCKET_IFNAME:-unset} NCCL=${NCCL_SOCKET_IFNAME:-unset}"; } >>"$FAKE_LOG"
    exit 0
fi
exec %s "$@"
"""


def _tools(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"srun": SRUN, "scontrol": SCONTROL, "fakeray": RAY, "py": PY % sys.executable}.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _workdir(tmp_path: Path, rows: int = 1000) -> tuple[Path, list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    pq.write_table(pa.table({"i": pa.array(range(rows), pa.int32())}), work / "data" / "train.parquet")
    model = work / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    overrides = ["algo=grpo", "data.train_files=data/train.parquet", "data.val_files=data/train.parquet",
                 f"actor_rollout_ref.model.path={model}", "trainer.project_name=p"]
    return work, overrides


def _job_run(tmp_path: Path, work: Path, overrides: list[str], job_id: int = 125, **env) -> tuple[dict, Path]:
    """The ``subprocess.run`` arguments of one plain job under the stand-ins, and the log they record to."""
    bin_dir = tmp_path / "bin"
    log = tmp_path / f"fake-{job_id}.log"
    full = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID=str(job_id), SLURM_JOB_NODELIST="n1",
                SLURM_NNODES="1", FGRPO_GPUS_PER_NODE="1", FGRPO_PYTHON=str(bin_dir / "py"),
                FGRPO_RAY_CMD=str(bin_dir / "fakeray"), FGRPO_RAY_TMPDIR=str(tmp_path), FGRPO_LOG_DIR=str(tmp_path),
                FAKE_LOG=str(log))
    full.update(env)
    for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "HF_HUB_OFFLINE", "FGRPO_RAY_PORT_BASE", "WANDB_BASE_URL",
                "HF_HOME", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        if var not in env:
            full.pop(var, None)
    full.setdefault("WANDB_MODE", "offline")  # no W&B host here; the W&B tests go online at a local one
    return {"args": ["bash", str(REPO / "slurm" / "train.sbatch"), *overrides], "cwd": work, "env": full,
            "timeout": 600}, log


def _log_lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _job(tmp_path: Path, work: Path, overrides: list[str], job_id: int = 125, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    kwargs, log = _job_run(tmp_path, work, overrides, job_id, **env)
    done = subprocess.run(**kwargs, capture_output=True, text=True)
    return done, _log_lines(log)


def _listen(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def _flag(words: list[str], name: str) -> int:
    return int(next(w for w in words if w.startswith(f"--{name}=")).split("=", 1)[1])


def _free_port() -> int:
    """A loopback port nothing listens on: a W&B host that does not answer."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _http_server():
    """A local HTTP server that answers every request (HEAD with 501): a W&B host that answers."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


REFUSALS = {
    # verl's default TP 2 on the job's one GPU: verl's init_model would assert, minutes into the job
    "tp2": ([], "error: actor_rollout_ref.rollout.tensor_model_parallel_size=2: a rollout replica spans"),
    "no-model": (["actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.model.path=/nowhere"],
                 "error: actor_rollout_ref.model.path=/nowhere: does not exist here"),
}
PLAIN_JOB_TESTS = ("test_the_plain_job_saves_once_per_epoch", "test_ray_and_the_driver_use_the_interface_of_the_ray_address",
                   "test_jobs_read_models_offline", "test_a_port_block_another_job_holds_moves_the_job_to_a_free_one",
                   "test_a_job_logging_to_wandb_online_checks_that_wandb_answers_first")


@pytest.fixture(scope="module")
def jobs(request, tmp_path_factory):
    """The module's jobs, each a whole ``train.sbatch`` in its own directory with its own stand-ins, run side by
    side (each is a bash script and its Python processes; they share no files, and distinct job ids keep them off
    each other's port blocks). ``plain``: job 125 while another job (id 5 = 125 - 120) holds the port block that
    125 derives, and the block after it holds a node port of this job's head."""
    import side_by_side

    commands, logs = {}, {}
    wandb = _http_server()
    tp1 = ["actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    for name, readers, extra, job_id, env in (
        # W&B online, at a host that answers
        ("plain", PLAIN_JOB_TESTS, tp1, 125, {"WANDB_MODE": "online",
                                              "WANDB_BASE_URL": f"http://127.0.0.1:{wandb.server_port}"}),
        ("site", "test_a_save_freq_of_the_run_and_an_interface_of_the_site_are_kept", [*tp1, "trainer.save_freq=7"],
         131, {"NCCL_SOCKET_IFNAME": "ib0", "HF_HUB_OFFLINE": "0"}),
        *((f"refused-{case}", "test_the_plain_job_stops_before_ray_when_the_preflight_refuses", refused_extra,
           132 + i, {}) for i, (case, (refused_extra, _)) in enumerate(REFUSALS.items())),
        ("no-wandb", "test_a_job_logging_to_wandb_online_stops_before_ray_when_wandb_does_not_answer", tp1, 140,
         {"WANDB_MODE": "online", "WANDB_BASE_URL": f"http://127.0.0.1:{_free_port()}"}),
    ):
        tmp_path = tmp_path_factory.mktemp(name)
        _tools(tmp_path)
        work, overrides = _workdir(tmp_path, rows=1000)
        kwargs, logs[name] = _job_run(tmp_path, work, [*overrides, *extra], job_id, **env)
        commands[name] = (readers, kwargs)
    commands = side_by_side.selected(request, commands)
    held = [_listen(20500), _listen(20610)] if "plain" in commands else []
    started = side_by_side.start(commands)
    try:
        if "plain" in commands:
            started.result("plain")  # the ports are held until the plain job has ended
    finally:
        for sock in held:
            sock.close()
    yield lambda name: (started.result(name), _log_lines(logs[name]))
    started.close()
    wandb.shutdown()


@pytest.fixture(scope="module")
def plain_job(jobs):
    done, log = jobs("plain")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = next(line for line in log if line.startswith("TRAIN ")).split()
    ray = next(line for line in log if line.startswith("RAY ")).split()
    return log, train, ray


def test_the_plain_job_saves_once_per_epoch(plain_job):
    _, train, _ = plain_job
    # verl's default save_freq -1 would never save (a requeue restarts at step 0): a checkpoint each epoch, as
    # launch does for save_per_epoch recipes (the trainer sets save_freq to verl's steps per epoch)
    assert "+trainer.save_per_epoch=true" in train and not [w for w in train if w.startswith("trainer.save_freq=")]


def test_ray_and_the_driver_use_the_interface_of_the_ray_address(plain_job):
    log, train, _ = plain_job
    # the node's Ray address is 127.0.0.1 (its Slurm NodeAddr), the interface holding it lo
    assert "RAYENV GLOO=lo NCCL=unset" in " ".join(line for line in log if line.startswith("RAYENV"))
    assert "TRAINENV GLOO=lo NCCL=unset" in log
    assert "+ray_kwargs.ray_init._node_ip_address=127.0.0.1" in train


def test_jobs_read_models_offline(plain_job):
    log, _, _ = plain_job
    assert any(line.startswith("RAYENV ") and line.endswith(" HF=1") for line in log), log


def test_a_job_logging_to_wandb_online_checks_that_wandb_answers_first(jobs):
    done, _ = jobs("plain")
    assert "[fgrpo] W&B: online, http://127.0.0.1:" in done.stdout and " answers" in done.stdout


def test_a_job_logging_to_wandb_online_stops_before_ray_when_wandb_does_not_answer(jobs):
    """verl's logger would fail only in fit(), after the model and vLLM loaded: the job stops first, in one line."""
    done, log = jobs("no-wandb")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "W&B" in line]
    assert line.startswith("fgrpo: error: W&B at http://127.0.0.1:") and "WANDB_MODE=offline" in line and \
        "wandb sync" in line
    assert not [line for line in log if line.startswith(("RAY ", "TRAIN "))]


def test_a_port_block_another_job_holds_moves_the_job_to_a_free_one(plain_job):
    _, _, ray = plain_job
    gcs = _flag(ray, "port")
    assert gcs != 20500 and gcs % 100 == 0 and 20000 <= gcs < 32000
    assert (_flag(ray, "ray-client-server-port"), _flag(ray, "dashboard-port")) == (gcs + 1, gcs + 2)
    node_ports = [_flag(ray, name) for name in ("node-manager-port", "object-manager-port", "metrics-export-port",
                                                "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                                "runtime-env-agent-port")]
    assert len(set(node_ports)) == 6 and 20610 not in node_ports and gcs not in node_ports


def test_a_save_freq_of_the_run_and_an_interface_of_the_site_are_kept(jobs):
    done, log = jobs("site")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    train = next(line for line in log if line.startswith("TRAIN ")).split()
    assert [w for w in train if w.startswith("trainer.save_freq=")] == ["trainer.save_freq=7"]
    assert "+trainer.save_per_epoch=true" not in train
    assert "RAYENV GLOO=lo NCCL=ib0 HF=0" in log and "TRAINENV GLOO=lo NCCL=ib0" in log


@pytest.mark.parametrize("case", list(REFUSALS))
def test_the_plain_job_stops_before_ray_when_the_preflight_refuses(jobs, case):
    message = REFUSALS[case][1]
    done, log = jobs(f"refused-{case}")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"fgrpo-verl job-env: {message}" in done.stderr
    assert not [line for line in log if line.startswith(("RAY ", "TRAIN "))]
    assert "fgrpo-ray" not in done.stdout + done.stderr


def test_the_interface_of_an_address_and_a_missing_one(capsys):
    from fgrpo_verl.job import node_net

    assert node_net.interface_of("127.0.0.1") == "lo"
    # an address of loopback's network that the interface does not list (the test Slurm cluster's nodes)
    assert node_net.interface_of("127.0.0.3") == "lo"
    assert node_net.interface_env("127.0.0.1", environ={}) == {"GLOO_SOCKET_IFNAME": "lo"}
    # an address of the documentation networks (RFC 5737) that no interface of this machine is on
    import ipaddress

    import psutil

    nets = [ipaddress.ip_network(f"{a.address}/{a.netmask}", strict=False) for addrs in psutil.net_if_addrs().values()
            for a in addrs if a.family == socket.AF_INET and a.netmask]
    absent = next(ip for ip in ("198.51.100.7", "203.0.113.7", "192.0.2.7")
                  if not any(ipaddress.ip_address(ip) in net for net in nets))
    assert node_net.main(["ifname", absent]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fgrpo node_net: error: no network interface of this host holds {absent}") and \
        err.count("\n") == 1


@pytest.mark.parametrize("missing, named", [
    ({"FGRPO_PYTHON": "/nowhere/bin/python"}, "interpreter /nowhere/bin/python not found on node"),
    ({"SLURM_SUBMIT_DIR": "/nowhere/launch"}, "launch directory /nowhere/launch does not exist on node"),
    ({"HF_HOME": "/nowhere/hf"}, "HF_HOME /nowhere/hf does not exist on node"),
])
def test_the_plain_job_names_a_path_its_node_does_not_see_first(tmp_path, missing, named):
    """Each path the job takes from the submitting shell is checked before anything runs: one line, status 2."""
    _tools(tmp_path)
    work, overrides = _workdir(tmp_path)
    done, log = _job(tmp_path, work, overrides, **missing)
    assert done.returncode == 2 and log == [], done.stdout[-3000:] + done.stderr[-3000:]
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"fgrpo: error: {named}") and "compute nodes" in line
