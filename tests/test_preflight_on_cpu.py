"""The preflight's certain rules (fgrpo_verl/preflight/rules.py), before submission. Each restated rule is pinned to
the code it restates on the same config or numbers: verl's ``ActorRolloutRefWorker.init_model`` run in-process
(TP x DP x PP vs world size), verl's ``prepare_micro_batches`` (micro-batches, the reference's per-GPU key), vLLM's
``SchedulerConfig``, ``QKVParallelLinear``, ``request_memory`` and KV cache spec (in a fresh process), TransferQueue in
a real verl run (tests/test_rehearsal_on_cpu.py, e2e). The memory estimate: tests/test_preflight_memory_on_cpu.py."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from fgrpo_verl import preflight
from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.config.paths import recipes_dir
from fgrpo_verl.environment import environment_with
from fgrpo_verl.integration.validation import validate
from fgrpo_verl.launch import plan_jobs
from fgrpo_verl.launch.recipe import load_recipe
from fgrpo_verl.preflight import memory, rules
from preflight_cases import (GIB, SEVEN_B, STRICT, compose, maze, maze_model, parquet_rows, refused, run,
                             verl_micro_batches, verl_source, warnings)

TESTS = Path(__file__).resolve().parent
_refused, _run, _maze, _rows, _maze_model = refused, run, maze, parquet_rows, maze_model

# recipes/maze.yaml at 2f836bb. Its base_model=maze_3m set no rollout TP, so verl's default (2) applied: written out
# here, since base_model=maze_3m now sets 1.
MAZE_2F836BB = """\
name: maze
project: fgrpo-maze
common:
  - algo=grpo
  - base_model=maze_3m
  - dataset=maze
  - cluster=1x1
  - data.train_batch_size=256
  - actor_rollout_ref.actor.ppo_mini_batch_size=256
  - actor_rollout_ref.actor.optim.lr=1e-4
  - actor_rollout_ref.actor.optim.lr_warmup_steps=0
  - trainer.total_training_steps=20000
  - trainer.total_epochs=6
  - trainer.save_freq=1000
  - trainer.test_freq=1000
  - actor_rollout_ref.rollout.val_kwargs.n=2048
  - actor_rollout_ref.rollout.val_kwargs.do_sample=true
  - actor_rollout_ref.rollout.val_kwargs.temperature=1.0
  - actor_rollout_ref.rollout.val_kwargs.top_p=1.0
  - actor_rollout_ref.rollout.val_kwargs.top_k=-1
  - actor_rollout_ref.rollout.tensor_model_parallel_size=2
runs:
  - {name: n4-g0p0, group: maze-n4, overrides: [actor_rollout_ref.rollout.n=4, algorithm.fgrpo.gamma=0.0]}
  - {name: n128-g0p0, group: maze-n128, overrides: [actor_rollout_ref.rollout.n=128, algorithm.fgrpo.gamma=0.0]}
"""


# ---------------------------------------------------------------- the two broken maze configurations of 2f836bb


def test_the_maze_recipe_of_2f836bb_is_refused_with_the_tp_message(tmp_path, monkeypatch, capsys):
    (tmp_path / "maze_2f836bb.yaml").write_text(MAZE_2F836BB)
    with pytest.raises(ValueError) as err:
        plan_jobs(str(tmp_path / "maze_2f836bb.yaml"), None, [], tmp_path / "logs", tmp_path)
    first = str(err.value).splitlines()[0]
    assert first.startswith("recipe maze, run n4-g0p0: actor_rollout_ref.rollout.tensor_model_parallel_size=2: ")
    assert "does not divide the 1 GPU(s)" in first and first.endswith("e.g. actor_rollout_ref.rollout."
                                                                     "tensor_model_parallel_size=1")
    # on the command line: exit 2, one line per refusal, no traceback, nothing submitted
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert cli_main(["launch", str(tmp_path / "maze_2f836bb.yaml"), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    (error,) = [line for line in captured.err.splitlines() if line.startswith("fgrpo-verl launch: error:")]
    assert error.startswith("fgrpo-verl launch: error: recipe maze, run n4-g0p0: "
                            "actor_rollout_ref.rollout.tensor_model_parallel_size=2: ")


def test_its_validation_over_transfer_queue_capacity_is_refused_naming_val_batch_size(tmp_path):
    """256 held-out mazes x val_kwargs.n = 2048 in one batch = 524,288 samples > TransferQueue's 100,000."""
    _rows(tmp_path / "data" / "maze" / "data" / "val.parquet", 256)
    recipe = tmp_path / "maze_2f836bb.yaml"
    recipe.write_text(MAZE_2F836BB.replace("tensor_model_parallel_size=2", "tensor_model_parallel_size=1"))
    with pytest.raises(ValueError) as err:
        plan_jobs(str(recipe), ["n128-g0p0"], [], tmp_path / "logs", tmp_path)
    (line,) = str(err.value).splitlines()
    assert line.startswith("recipe maze, run n128-g0p0: data.val_batch_size=None: validation puts 256 prompts x "
                           "val_kwargs.n=2048 = 524288 samples into TransferQueue next to the 32768-sample training "
                           "batch (557056 in all), over its capacity of 100000")
    # the largest validation batch that fits beside the training batch: (100000 - 32768) // 2048 = 32
    assert line.endswith("validate in batches, data.val_batch_size=32 or fewer")
    # the shipped recipe validates 16 mazes at a time: 32768 + 16 x 2048 = 65536 samples
    report = _run(_maze("n128-g0p0"), tmp_path)
    assert "TransferQueue holds at most 65536 of 100000 samples" in report.summary()
    # without validation batching, a capacity of 557056 would hold it
    _run([*_maze("n128-g0p0"), "data.val_batch_size=null",
          "transfer_queue.backend.SimpleStorage.total_storage_size=557056"], tmp_path)


def _tp_probe(workdir: Path, env: dict[str, str], tp: int):
    """The maze config at rollout TP ``tp`` on the CPU backend, and the ``subprocess.run`` arguments of
    tests/verl_init_probe.py on it (verl's ``ActorRolloutRefWorker.init_model`` in a fresh process, one CPU rank)."""
    overrides = ["backend=cpu", *_maze("n4-g0p0"), f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}"]
    with environment_with(env):
        config = compose(overrides)
        OmegaConf.resolve(config)
    path = workdir / f"tp{tp}.yaml"
    OmegaConf.save(config, path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    job_env = dict(os.environ, **{k: str(v) for k, v in config.ray_kwargs.ray_init.runtime_env.env_vars.items()},
                   RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return config, {"args": [sys.executable, str(TESTS / "verl_init_probe.py"), str(path)], "env": job_env,
                    "timeout": 600}


def test_the_tp_rule_is_verls_init_model_assert(fresh):
    """The same maze config (2f836bb's TP 2 on its one GPU, on the CPU backend with a stand-in model): verl's own
    ``ActorRolloutRefWorker.init_model`` refuses it, in-process, and so does the preflight; with TP 1 both accept."""
    workdir, started, configs = fresh["tp"]
    results = {}
    for tp in (2, 1):
        done = started.result(f"tp{tp}")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        verdict = [line for line in done.stdout.splitlines() if line.startswith("INIT ")]
        try:
            preflight.run(configs[tp], workdir)
            ours = "ok"
        except preflight.PreflightError as exc:
            ours = str(exc)
        results[tp] = (verdict, ours)
    verl_says, ours = results[2]
    assert verl_says == ["INIT REFUSED: rollout world_size: 1 is not divisible by infer_world_size: 2"]
    assert ours.startswith("actor_rollout_ref.rollout.tensor_model_parallel_size=2: ") and "\n" not in ours
    assert results[1] == (["INIT OK"], "ok")


# ---------------------------------------------------------------- batches


def test_micro_batches_must_divide_each_gpus_share_as_verls_prepare_micro_batches_asserts(tmp_path):
    """At N = 4 one update is 256 x 4 = 1,024 samples on the maze's one GPU: MaxRL's 4,096 per micro-batch does
    not divide it, and verl's own micro-batch split refuses it; 1,024 and 512 split, as verl splits them."""
    with pytest.raises(AssertionError, match="data size must be divisible"):
        verl_micro_batches(1024, 4096)
    assert verl_micro_batches(1024, 1024) == [1024] and verl_micro_batches(1024, 512) == [512, 512]
    (line,) = _refused(_maze("n4-g0p0", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4096"), tmp_path)
    assert line.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4096: each GPU's share of a "
                           "mini-batch is 1024 samples") and line.endswith("e.g. 1024")
    (line,) = _refused(_maze("n4-g0p0", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4096"), tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4096: each GPU computes "
                           "log-probs of 1024 samples")
    for micro in (1024, 512):
        _run(_maze("n4-g0p0", f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
                   f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}"), tmp_path)
    # the shipped micro-batch (1,024) divides every N's share: N / 4 micro-batches per update
    assert "32768 samples per step, 32 micro-batch(es) of 1024 per GPU per update" in \
        _run(_maze("n128-g0p0"), tmp_path).summary()


@pytest.mark.parametrize("section, per_gpu, legacy", [
    ("actor", "ppo_micro_batch_size_per_gpu", "ppo_micro_batch_size"),
    ("rollout", "log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size"),
    ("ref", "log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size")])
def test_a_legacy_micro_batch_key_passes_validate_config_and_is_refused_naming_the_per_gpu_key(
        tmp_path, section, per_gpu, legacy):
    """verl's validate_config takes ``actor.ppo_micro_batch_size`` and ``rollout.`` / ``ref.log_prob_micro_batch_size``
    in place of their per-GPU keys, but the workers read only those: init_model asserts the actor's and the
    rollout's are set, and the reference worker's reaches prepare_micro_batches as None, which fails there."""
    block = f"actor_rollout_ref.{section}"
    overrides = [*SEVEN_B, "actor_rollout_ref.actor.use_kl_loss=true", f"{block}.{legacy}=64",
                 f"{block}.{per_gpu}=null"]
    validate(compose(overrides))  # verl's own validate_config passes it
    if section == "ref":
        with pytest.raises(TypeError):
            verl_micro_batches(128, None)
    else:
        assert f"assert self.config.{section}.{per_gpu} is not None" in verl_source("workers/engine_workers.py")
    (line,) = _refused(overrides, tmp_path)
    assert line.startswith(f"{block}.{per_gpu}=None: verl's workers size this pass's micro-batches by it alone") \
        and f"the legacy {block}.{legacy}=64 passes validate_config and is never read" in line, line
    assert line.endswith(f"e.g. 4 = 64 over 16 GPU(s), and remove {block}.{legacy}"), line
    _run([*overrides[:-2], f"{block}.{per_gpu}=4"], tmp_path)
    if section != "actor":  # with dynamic batch sizes a log-prob pass packs by tokens and reads neither key
        _run([*overrides, "actor_rollout_ref.actor.use_dynamic_bsz=true",
              "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true"], tmp_path)


def test_a_mini_batch_that_does_not_split_over_the_gpus_is_refused(tmp_path):
    """verl's validate_config passes it (256 x 8 divides 16 GPUs); verl's TrainingWorker.train_mini_batch asserts
    mini_batch_size % dp == 0 at the first update: 1 prompt x 8 samples over 16 GPUs."""
    overrides = ["algo=grpo", "base_model=qwen3_4b_base", "dataset=deepscaler", "cluster=2x8",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=1"]
    validate(compose(overrides))
    (line,) = _refused(overrides, tmp_path)
    assert line.startswith("actor_rollout_ref.actor.ppo_mini_batch_size=1: a mini-batch of 1 prompts x rollout.n=8 = "
                           "8 samples")
    assert "16 data-parallel GPU(s)" in line and line.endswith("make ppo_mini_batch_size x 8 a multiple of 16")


# ---------------------------------------------------------------- rollout layout


def test_replicas_and_verls_rollout_config_checks(tmp_path):
    llm = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"]
    assert "8 rollout replica(s) of TP 2" in _run(llm, tmp_path).summary()
    # a replica of 16 GPUs on nodes of 8 spans two whole nodes: verl accepts it
    assert "1 rollout replica(s) of TP 16" in _run(["algo=grpo", "base_model=qwen3_4b_base", "dataset=deepscaler",
                                                    "cluster=2x8", "actor_rollout_ref.rollout.tensor_model_parallel_size=16"],
                                                   tmp_path).summary()
    # vLLM splits attention heads over TP: Qwen2.5-7B's 28 do not split 16 ways
    (line,) = _refused([*llm, "actor_rollout_ref.rollout.tensor_model_parallel_size=16"], tmp_path)
    assert "28 attention heads do not split over TP 16" in line
    (line,) = _refused([*llm, "actor_rollout_ref.rollout.tensor_model_parallel_size=3"], tmp_path)
    assert "does not divide the 16 GPU(s)" in line
    (line,) = _refused([*llm, "cluster=4x8", "actor_rollout_ref.rollout.tensor_model_parallel_size=12"], tmp_path)
    assert "does not divide the 32 GPU(s)" in line and line.endswith("tensor_model_parallel_size=8")
    # no TP fits when data parallelism is what does not divide the GPUs: the fix names it, with a value that fits
    (line,) = _refused([*llm, "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                        "actor_rollout_ref.rollout.data_parallel_size=3"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.data_parallel_size=3: a rollout replica spans TP x DP x PP = "
                           "1 x 3 x 1 = 3 GPUs") and line.endswith("e.g. actor_rollout_ref.rollout.data_parallel_size=2 "
                                                                   "with TP 1")
    # RolloutConfig's own __post_init__ (verl): pipeline parallel rollout is not implemented for vLLM
    (line,) = _refused([*llm, "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                        "actor_rollout_ref.rollout.pipeline_model_parallel_size=2"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.pipeline_model_parallel_size=2: verl's RolloutConfig refuses "
                           "the rollout settings: "
                           "Current rollout self.name='vllm' not implemented pipeline_model_parallel_size > 1 yet.")


def test_the_hf_rollout_takes_one_gpu_per_replica(tmp_path):
    """backend=gpu_hf (fgrpo-verl's hf rollout on GPUs) with Qwen2.5-7B's TP 2: its HFReplica would refuse at start."""
    (line,) = _refused(["backend=gpu_hf", "algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8",
                        "actor_rollout_ref.rollout.tensor_model_parallel_size=2"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.tensor_model_parallel_size=2: rollout.name=hf serves one model "
                           "copy per GPU")
    _run(["backend=gpu_hf", "algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"], tmp_path)


def test_the_replica_layout_rule_is_verls_rollout_replica(tmp_path):
    """A replica that spans nodes must take whole nodes. 3 nodes x 8 GPUs hold two replicas of TP 12 by count, but
    each would straddle a node boundary: verl's RolloutReplica.__init__ (which the preflight calls) refuses it."""
    line = _refused(["algo=grpo", "base_model=qwen3_4b_base", "dataset=deepscaler", "cluster=2x8",
                     "trainer.nnodes=3", "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                     "actor_rollout_ref.rollout.data_parallel_size=3"], tmp_path)[0]
    assert line.startswith("actor_rollout_ref.rollout.tensor_model_parallel_size=4: verl's RolloutReplica refuses "
                           "the replica layout: world_size 12 must be divisible by gpus_per_node 8")


# verl's and vLLM's own code on the numbers the rules below restate, run once in a subprocess (importing vLLM here
# would leave it imported for later tests; fgrpo-verl's cpu_vllm alias lets verl import its vLLM server module):
#   SCHED: verl's vLLMHttpServer._validate_configs (max_model_len, and max_num_batched_tokens without chunked
#          prefill), then vLLM's SchedulerConfig on what verl passes it
#   QKV:   vLLM's QKVParallelLinear (every decoder's attention) at a tensor-parallel size, KV heads split or replicated
#   START: vLLM's request_memory (its worker's start) with the free memory left beside the actor's parameters
#   KV:    vLLM's FullAttentionSpec: a bf16 KV cache's bytes per token on one GPU over the model's layers (the KV
#          heads one GPU holds at a TP: vLLM's ModelConfig.get_num_kv_heads, at least one)
VERL_VLLM_PROBE = """
import sys
from types import SimpleNamespace
from fgrpo_verl.backends.cpu_vllm.distribution import install
install()
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer
from vllm.config import SchedulerConfig, VllmConfig, set_current_vllm_config
import vllm.model_executor.layers.linear as linear
import vllm.model_executor.parameter as parameter
from vllm.v1.worker.utils import request_memory
from vllm.v1.kv_cache_interface import FullAttentionSpec
import torch

def verdict(call):
    try:
        call()
        return "accepted"
    except (AssertionError, ValueError) as exc:
        return "refused " + " ".join(str(exc).split())

for chunked, tokens, seqs, mml in SCHED:
    config = SimpleNamespace(max_model_len=mml, enable_chunked_prefill=chunked, max_num_batched_tokens=tokens)
    server = SimpleNamespace(config=config, model_config=SimpleNamespace(
        hf_config=SimpleNamespace(max_position_embeddings=131072)))
    vLLMHttpServer._validate_configs(server)
    print("SCHED", chunked, tokens, seqs, mml, config.max_num_batched_tokens, verdict(lambda: SchedulerConfig(
        max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=seqs, max_model_len=config.max_model_len,
        enable_chunked_prefill=chunked, is_encoder_decoder=False)))

def qkv(heads, kv, tp):
    for module in (linear, parameter):
        module.get_tensor_model_parallel_world_size = lambda: tp
        module.get_tensor_model_parallel_rank = lambda: 0
    with set_current_vllm_config(VllmConfig()):
        linear.QKVParallelLinear(hidden_size=8, head_size=2, total_num_heads=heads, total_num_kv_heads=kv, bias=False)

for heads, kv, tp in QKV:
    print("QKV", heads, kv, tp, verdict(lambda: qkv(heads, kv, tp)))

for total, free, util in START:
    snapshot = SimpleNamespace(total_memory=total, free_memory=free, device_="cuda:0")
    print("START", total, free, util, verdict(lambda: request_memory(snapshot, SimpleNamespace(
        gpu_memory_utilization=util))))

for layers, kv, head, tp in KV:
    spec = FullAttentionSpec(block_size=16, num_kv_heads=max(1, kv // tp), head_size=head, dtype=torch.bfloat16)
    print("KV", layers, kv, head, tp, layers * spec.page_size_bytes // 16)
"""
SCHED = [(True, 8192, 32768, 512), (True, 65536, 32768, 512), (False, 8192, 32768, 40000),
         (False, 8192, 32768, 16384), (True, 8192, 32768, 40000)]
QKV = [(24, 6, 2), (24, 6, 4), (24, 6, 8), (24, 2, 8)]
# Qwen2.5-7B's 7.62e9 fp32 parameters over 16 GPUs (1.77 GiB each) on an H100 as torch reports it (79.2 GiB), at
# u = 0.97 and 0.98
H100 = int(79.2 * GIB)
START = [(H100, H100 - int(7.62e9 * 4 / 16), util) for util in (0.97, 0.98)]
# the paper's models (layers, KV heads, head size) at TP 1, 2 and 8 (Qwen2.5-7B's 4 KV heads replicate over 8)
KV = [(28, 4, 128, 2), (28, 4, 128, 8), (36, 8, 128, 1), (28, 8, 128, 1), (28, 8, 128, 2)]


VLLM_VERDICT_TESTS = ("test_the_scheduler_rule_is_vllms",
                      "test_without_chunked_prefill_verl_raises_the_token_budget_to_max_model_len",
                      "test_kv_heads_must_split_or_replicate_evenly_over_tp_as_vllms_attention_asserts",
                      "test_vllm_start_is_vllms_request_memory", "test_the_kv_cache_rule_counts_vllms_bytes_per_token")


@pytest.fixture(scope="module", autouse=True)
def fresh(request, tmp_path_factory):
    """This module's fresh processes (verl's init_model at TP 2 and 1; verl's and vLLM's own code on the numbers),
    started with the module's first test so that they run beside its in-process tests; each test waits for its
    own."""
    import side_by_side

    tests = side_by_side.selected_tests(request)
    commands, configs, workdir = {}, {}, None
    if tests.intersection(VLLM_VERDICT_TESTS):
        code = f"SCHED = {SCHED!r}\nQKV = {QKV!r}\nSTART = {START!r}\nKV = {KV!r}\n" + VERL_VLLM_PROBE
        commands["vllm"] = {"args": [sys.executable, "-c", code], "timeout": 600}
    if "test_the_tp_rule_is_verls_init_model_assert" in tests:
        from rehearsal import standin_maze

        workdir = tmp_path_factory.mktemp("tp_rule")
        env = standin_maze(workdir / "maze", n_train=2)
        for tp in (2, 1):
            configs[tp], commands[f"tp{tp}"] = _tp_probe(workdir, env, tp)
    started = side_by_side.start(commands)
    yield {"tp": (workdir, started, configs), "vllm": started}
    started.close()


@pytest.fixture(scope="module")
def verl_vllm_verdicts(fresh) -> dict[str, list[list[str]]]:
    done = fresh["vllm"].result("vllm")
    found: dict[str, list[list[str]]] = {"SCHED": [], "QKV": [], "START": [], "KV": []}
    for line in done.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind in found:
            found[kind].append(rest.split(" ", {"SCHED": 5, "KV": 4}.get(kind, 3)))  # the verdict last, whole
    assert [len(v) for v in found.values()] == [len(SCHED), len(QKV), len(START), len(KV)], \
        done.stdout[-3000:] + done.stderr[-3000:]
    return found


def test_the_scheduler_rule_is_vllms(tmp_path, verl_vllm_verdicts):
    """vLLM's own SchedulerConfig (vLLM's CPU build, the Makefile installs it) on the maze's engine settings: it
    refuses fewer tokens per step than sequences, as the preflight does, and takes the recipe's 65,536 for 32,768
    sequences."""
    refused, accepted = verl_vllm_verdicts["SCHED"][:2]
    assert refused[5].startswith("refused") and \
        "max_num_batched_tokens (8192) must be greater than or equal to max_num_seqs (32768)" in refused[5]
    assert accepted[5] == "accepted"
    (line,) = _refused([*_maze(), "actor_rollout_ref.rollout.max_num_batched_tokens=8192"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.max_num_batched_tokens=8192: ")
    _run(_maze(), tmp_path)


def test_without_chunked_prefill_verl_raises_the_token_budget_to_max_model_len(tmp_path, verl_vllm_verdicts):
    """verl's vLLM server raises max_num_batched_tokens to max_model_len when chunked prefill is off, before vLLM's
    SchedulerConfig sees it: 8,192 tokens for 32,768 sequences pass at max_model_len 40,000 and fail at 16,384 (and
    with chunked prefill on, where verl leaves the budget alone). The preflight gives verl's verdict on each."""
    seven_b = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8",
               "actor_rollout_ref.rollout.max_num_batched_tokens=8192", "actor_rollout_ref.rollout.max_num_seqs=32768"]
    for chunked, tokens, seqs, mml, raised, verdict in verl_vllm_verdicts["SCHED"][2:]:
        overrides = [*seven_b, f"actor_rollout_ref.rollout.enable_chunked_prefill={chunked.lower()}",
                     f"actor_rollout_ref.rollout.max_model_len={mml}"]
        if verdict == "accepted":
            assert (chunked, raised) == ("False", "40000")
            _run(overrides, tmp_path)
            continue
        assert f"max_num_batched_tokens ({raised}) must be greater than or equal to max_num_seqs (32768)" in verdict
        (line,) = _refused(overrides, tmp_path)
        assert line.startswith("actor_rollout_ref.rollout.max_num_batched_tokens=8192: ")
        if chunked == "False":  # the budget verl hands vLLM, and the other way to raise it
            assert f"verl raises it to max_model_len={mml}" in line and "max_model_len=32768" in line
        else:
            assert "verl raises" not in line
    # max_model_len unset: verl raises the budget to the model's max_position_embeddings (131,072)
    _run([*seven_b, "actor_rollout_ref.rollout.enable_chunked_prefill=false"], tmp_path)


def _config_only_model(path: Path, heads: int, kv_heads: int) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.joinpath("config.json").write_text(
        f'{{"vocab_size": 1024, "hidden_size": 768, "num_hidden_layers": 2, "num_attention_heads": {heads},'
        f' "num_key_value_heads": {kv_heads}, "max_position_embeddings": 32768, "intermediate_size": 1024}}')
    return path


def test_kv_heads_must_split_or_replicate_evenly_over_tp_as_vllms_attention_asserts(tmp_path, verl_vllm_verdicts):
    """24 attention heads, 6 KV heads: TP 2 splits the KV heads 3 per GPU, TP 4 and 8 divide the attention heads but
    neither split the 6 KV heads nor replicate them evenly; 2 KV heads replicate over TP 8. vLLM's QKVParallelLinear
    on each, and the preflight on the same model and TP."""
    for heads, kv, tp, verdict in verl_vllm_verdicts["QKV"]:
        model = _config_only_model(tmp_path / f"m{heads}-{kv}", int(heads), int(kv))
        overrides = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8",
                     f"actor_rollout_ref.model.path={model}",
                     f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}"]
        if verdict == "accepted":
            assert "rollout replica(s) of TP " + tp in _run(overrides, tmp_path).summary()
            continue
        assert verdict.startswith("refused") and "is not divisible by" in verdict
        (line,) = _refused(overrides, tmp_path)
        assert line.startswith(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}: the model's {kv} KV heads "
                               f"neither split over TP {tp} nor replicate evenly across it"), line
        assert line.endswith("e.g. actor_rollout_ref.rollout.tensor_model_parallel_size=2"), line


# ---------------------------------------------------------------- lengths, and the memory that is certain


def test_prompt_plus_response_must_fit_max_model_len_and_the_models_positions(tmp_path):
    _maze_model(tmp_path / "data" / "maze" / "sft_model", preset="tiny")  # 256 positions < 320 + 180
    (line,) = _refused(_maze(), tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.max_model_len=None: prompt + response = "
                           "data.max_prompt_length + data.max_response_length = 500 tokens does not fit the model's "
                           "max_position_embeddings (256)")
    _maze_model(tmp_path / "data" / "maze" / "sft_model")  # the paper's 512 positions
    _run(_maze(), tmp_path)
    (line,) = _refused([*_maze(), "actor_rollout_ref.rollout.max_model_len=600"], tmp_path)
    assert "above the model's max_position_embeddings=512" in line
    (line,) = _refused([*_maze(), "actor_rollout_ref.rollout.max_model_len=400"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.max_model_len=400: prompt + response") and "raise" in line
    # verl would run it, cutting the longer prompts' responses: the refusal says so, and whose policy it is
    assert "verl would run and cut the responses to prompts over 220 tokens to 400 - prompt tokens" in line
    assert "fgrpo-verl's policy, not verl's" in line
    assert line.endswith("shorten data.max_response_length to 80 or raise actor_rollout_ref.rollout.max_model_len "
                         "to 500")
    _run([*_maze(), "actor_rollout_ref.rollout.max_model_len=500"], tmp_path)  # the bound itself fits
    # prompts that alone fill the window: no response length can help, and the fix says so
    (line,) = _refused([*_maze(), "actor_rollout_ref.rollout.max_model_len=300"], tmp_path)
    assert line.endswith("data.max_prompt_length=320 alone fills 300 tokens: shorten the prompts and the responses to "
                         "300 tokens together or raise actor_rollout_ref.rollout.max_model_len to 500"), line


def test_vllm_start_is_vllms_request_memory(tmp_path, verl_vllm_verdicts):
    """Qwen2.5-7B on 2 x 8 H100 (79.2 GiB as torch reports it): vLLM starts beside the actor's fp32 parameters alone
    (1.8 GiB per GPU; AdamW's moments come at the first update). vLLM's own request_memory on the same numbers starts
    at u = 0.97 and refuses 0.98; so does the preflight, as a certain rule (no estimate in its line). 0.97 then
    warns: from the second step its KV cache wakes beside the parameters and moments (an estimate)."""
    util = "actor_rollout_ref.rollout.gpu_memory_utilization"
    starts, stops = verl_vllm_verdicts["START"]
    assert starts[-1] == "accepted" and stops[-1].startswith("refused Free memory on device")
    (line,) = _refused([*SEVEN_B, f"{util}=0.98"], tmp_path)
    assert line.startswith(f"{util}=0.98: vLLM starts beside 1.8 GiB per GPU of the actor's parameters") and \
        "vLLM's request_memory refuses to start" in line, line
    assert line.endswith("lower it to 0.97, or set actor_rollout_ref.actor.fsdp_config.param_offload=true"), line
    (warning,) = warnings(_run([*SEVEN_B, f"{util}=0.97"], tmp_path))
    assert warning.startswith(f"warning: {util}=0.97: the rollout phase needs"), warning
    assert not warnings(_run([*SEVEN_B, f"{util}=0.97", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"],
                             tmp_path))


def test_the_kv_cache_rule_counts_vllms_bytes_per_token(tmp_path, verl_vllm_verdicts):
    """vLLM's own KV cache spec gives the bytes per token the rule counts, for the paper's models at each TP. vLLM
    refuses to start when its share less its bf16 weights cannot hold one max_model_len sequence (Llama-3.2-3B:
    131,072 positions when unset): refused, naming both fixes; each passes, and a share just below fails."""
    for layers, kv, head, tp, vllm_bytes in verl_vllm_verdicts["KV"]:
        config = compose([*SEVEN_B, f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}"])
        shape = SimpleNamespace(params=0.0, num_hidden_layers=int(layers), num_key_value_heads=int(kv),
                                head_dim=int(head), max_position_embeddings=1)
        assert memory.kv_cache(config, shape, 1.0)[2] == int(vllm_bytes), (layers, kv, head, tp)
    llama = ["algo=grpo", "base_model=llama32_3b_instruct", "dataset=deepscaler", "cluster=2x8"]
    util = "actor_rollout_ref.rollout.gpu_memory_utilization"
    (line,) = _refused([*llama, f"{util}=0.15"], tmp_path)
    assert "holds fewer than max_model_len=131072 tokens" in line and "max_model_len=9216" in line, line
    share = float(line.split("raise it to ")[1].split(",")[0])
    _run([*llama, f"{util}=0.15", "actor_rollout_ref.rollout.max_model_len=9216"], tmp_path)
    _run([*llama, f"{util}={share}"], tmp_path)
    _refused([*llama, f"{util}={share - 0.01:.2f}"], tmp_path)


def test_model_states_over_a_gpu_are_refused_even_with_offload(tmp_path):
    """Qwen2.5-7B on one GPU: its fp32 parameters, gradients and AdamW moments (16 B x 7.62e9 = 113.5 GiB) are on
    the GPU at each update, param/optimizer offload or not (verl's train mode loads them back): certain, refused in
    one line. FSDP2's offload_policy keeps them on the host, and passes; FSDP1 does not read it."""
    one = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=1x1",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    offload = ["actor_rollout_ref.actor.fsdp_config.param_offload=true",
               "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"]
    policy = "actor_rollout_ref.actor.fsdp_config.offload_policy=true"
    for extra in ([], offload, [policy]):
        (line,) = _refused([*one, *extra], tmp_path)
        assert line.startswith("trainer.n_gpus_per_node=1: the update holds 113.5 GiB per GPU of the actor's "
                               "parameters, gradients and AdamW moments") and not line.endswith(STRICT), line
        assert line.endswith("or FSDP2's CPU offload (backend=gpu_fsdp2 with "
                             "actor_rollout_ref.actor.fsdp_config.offload_policy=true)")
    assert "memory per GPU (estimate)" in _run([*one, *offload, "backend=gpu_fsdp2", policy], tmp_path).summary()


def test_every_run_of_every_shipped_recipe_passes(tmp_path):
    """With the maze's data and (paper-size) model where the launcher looks for them, so that the TransferQueue and
    memory checks see everything; the LLMs' architectures are their published ones."""
    _rows(tmp_path / "data" / "maze" / "data" / "val.parquet", 256)
    _maze_model(tmp_path / "data" / "maze" / "sft_model")
    names = sorted(p.stem for p in recipes_dir().glob("*.yaml"))
    assert names == ["controls", "group_size", "maze", "paper_main"]
    checked = []
    for name in names:
        recipe = load_recipe(name)
        for run in recipe.runs:
            report = preflight.run(compose(recipe.run_overrides(run)), tmp_path)
            summary = report.summary()
            assert "memory per GPU (estimate): start " in summary and "TransferQueue holds at most" in summary, \
                (name, run.name, summary)
            assert not warnings(report), (name, run.name, summary)  # each fits the estimate too
            checked.append((name, run.name))
    assert len(checked) >= 36 + 6 + 3 + 18 and len(set(checked)) == len(checked)


# ---------------------------------------------------------------- where the preflight runs


def test_dry_run_prints_each_runs_preflight(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert cli_main(["launch", "maze", "--dry-run", "--only", "n128-g0p5"]) == 3
    out = capsys.readouterr().out
    # the summary names each distinct preflight once, beside the run it is about
    assert "n128-g0p5: preflight: 1 rollout replica(s) of TP 1 x DP 1 x PP 1 on 1 GPU(s); 32768 samples per step" in out
    assert "memory not estimated (model architecture unknown here)" in out  # the maze's model is built, not here


def _cache_snapshot(cache: Path, repo: str, files: dict[str, bytes]) -> Path:
    """A Hugging Face cache entry as huggingface_hub lays it out (refs/main -> snapshots/<commit>/...)."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    commit = "0" * 40
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        (snapshot / name).write_bytes(data)
    return snapshot


def test_a_submit_refuses_a_model_that_is_not_here(tmp_path, monkeypatch):
    """Jobs run with HF_HUB_OFFLINE=1: a Hub id must be in the Hugging Face cache (all of its weight shards) before
    the submit, and a local path must exist. A dry run does not ask (the model may live only where jobs run)."""
    import huggingface_hub.constants

    cache = tmp_path / "hf"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    _rows(tmp_path / "data" / "deepscaler" / "train.parquet", 39_202)

    def submit_plan():
        return plan_jobs("paper_main", ["qwen25_7b-grpo-g0p5"], [], tmp_path / "logs", tmp_path, require_data=True)

    with pytest.raises(ValueError) as err:
        submit_plan()
    (line,) = str(err.value).splitlines()
    assert line.startswith("recipe paper_main, run qwen25_7b-grpo-g0p5: actor_rollout_ref.model.path=Qwen/Qwen2.5-7B:"
                           f" not in the Hugging Face cache ({cache}), and jobs run with HF_HUB_OFFLINE=1; ")
    assert "hf download Qwen/Qwen2.5-7B" in line
    plan_jobs("paper_main", ["qwen25_7b-grpo-g0p5"], [], tmp_path / "logs", tmp_path)  # a dry run
    index = b'{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}'
    snapshot = _cache_snapshot(cache, "Qwen/Qwen2.5-7B", {
        "config.json": b"{}", "model.safetensors.index.json": index, "model-00001-of-00002.safetensors": b""})
    with pytest.raises(ValueError, match=r"lacks 1 of the 2 weight shards its model.safetensors.index.json lists"):
        submit_plan()
    (snapshot / "model-00002-of-00002.safetensors").write_bytes(b"")
    submit_plan()
    # a local path that is not there
    with pytest.raises(ValueError, match=r"actor_rollout_ref.model.path=/nowhere/model: does not exist here"):
        plan_jobs("paper_main", ["qwen25_7b-grpo-g0p5"], ["actor_rollout_ref.model.path=/nowhere/model"],
                  tmp_path / "logs", tmp_path, require_data=True)


def test_doctor_runs_the_preflight_of_a_recipe(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")  # no W&B host here (doctor asks it when online)
    (tmp_path / "maze_2f836bb.yaml").write_text(MAZE_2F836BB)
    _maze_model(tmp_path / "data" / "maze" / "sft_model")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["doctor", "--no-ray", "--recipe", "maze", "--only", "n4-g0p0"]) == 0
    out = capsys.readouterr().out
    assert "[ok]   preflight (recipe maze, 1 run): preflight: " in out and "memory per GPU (estimate): start " in out
    assert cli_main(["doctor", "--no-ray", "--recipe", str(tmp_path / "maze_2f836bb.yaml")]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] preflight (recipe maze, 2 runs): ValueError: recipe maze, run n4-g0p0: " \
           "actor_rollout_ref.rollout.tensor_model_parallel_size=2: " in out


# ---------------------------------------------------------------- backend=cpu_vllm: what vLLM's CPU build refuses late

CPU_VLLM = ["backend=cpu_vllm", "data.max_prompt_length=100", "data.max_response_length=100"]


def test_cpu_vllm_refuses_a_head_size_vllms_cpu_attention_lacks(tmp_path):
    _maze_model(tmp_path / "data" / "maze" / "sft_model", preset="tiny")  # head size 64 / 4 = 16
    (line,) = _refused([*_maze(), *CPU_VLLM], tmp_path)
    assert line.startswith("actor_rollout_ref.model.path=data/maze/sft_model: its attention head size 16 has no "
                           "kernel in vLLM's CPU attention") and "32, 64, 80" in line and "backend=cpu)" in line
    _run([*_maze(), *CPU_VLLM[1:]], tmp_path)  # the hf rollout serves it
    _maze_model(tmp_path / "data" / "maze" / "sft_model")  # the paper's maze model: head size 64
    _run([*_maze(), *CPU_VLLM], tmp_path)


def test_cpu_vllm_names_the_weight_sync_bucket_a_larger_model_needs(tmp_path):
    """Qwen2.5-0.5B's published shape: its fp32 embedding (151,936 x 896 x 4 B = 519.3 MiB) is over the backend's
    64 MiB bucket, which verl's BucketedWeightSender refuses at the first sync."""
    model = tmp_path / "qwen05"
    model.mkdir()
    model.joinpath("config.json").write_text(
        '{"vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,'
        ' "num_key_value_heads": 2, "max_position_embeddings": 32768, "intermediate_size": 4864}')
    key = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
    (line,) = _refused([*_maze(), *CPU_VLLM, f"actor_rollout_ref.model.path={model}"], tmp_path)
    assert line.startswith(f"{key}=64: the model's embedding (151936 x 896 fp32) does not fit") and line.endswith(
        f"set {key}=520 or more")
    _run([*_maze(), *CPU_VLLM, f"actor_rollout_ref.model.path={model}", f"{key}=520"], tmp_path)


@pytest.mark.parametrize("raw", ["0", "ten", "inf"])
def test_cpu_vllm_refuses_a_bad_weight_sync_timeout_before_the_job(tmp_path, monkeypatch, raw):
    _maze_model(tmp_path / "data" / "maze" / "sft_model")
    monkeypatch.setenv("FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S", raw)
    (line,) = _refused([*_maze(), *CPU_VLLM], tmp_path)
    assert line.startswith("FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S=(environment): FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S must be a "
                           f"positive number of seconds, got {raw!r}")
    _run([*_maze(), *CPU_VLLM[1:]], tmp_path)  # only the vLLM backend reads it


# ---------------------------------------------------------------- dynamic batch sizes, fused kernels, the reference

DYNAMIC = "actor_rollout_ref.actor.use_dynamic_bsz=true"


def test_dynamic_batch_sizes_keep_the_mini_batch_rule_and_drop_the_micro_batch_one(tmp_path):
    """verl's TrainingWorker.train_mini_batch asserts mini_batch_size % dp == 0 whatever sizes the micro-batches;
    prepare_micro_batches checks no micro-batch size when it packs by tokens."""
    qwen4b = ["algo=grpo", "base_model=qwen3_4b_base", "dataset=deepscaler", "cluster=2x8"]
    (line,) = _refused([*qwen4b, DYNAMIC, "actor_rollout_ref.actor.ppo_mini_batch_size=1"], tmp_path)
    assert line.startswith("actor_rollout_ref.actor.ppo_mini_batch_size=1: a mini-batch of 1 prompts x rollout.n=8 = "
                           "8 samples does not split over the 16 data-parallel GPU(s)") and "with dynamic batch sizes" \
        in line
    # 2 prompts x 8 = 16 samples: one per GPU. A micro-batch of 3 does not divide it: refused with fixed micro-batches,
    # not read with dynamic ones
    two = [*qwen4b, "actor_rollout_ref.actor.ppo_mini_batch_size=2",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"]
    (line,) = _refused(two, tmp_path)
    assert line.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3: each GPU's share of a mini-batch "
                           "is 1")
    assert "verl packs each micro-batch up to its token budget" in _run([*two, DYNAMIC], tmp_path).summary()


def test_dynamic_batch_sizes_need_their_token_budgets(tmp_path):
    """verl's ActorRolloutRefWorker.init_model asserts the actor's and the rollout's budgets are set, and that the
    rollout's log_prob_use_dynamic_bsz is the actor's use_dynamic_bsz; the reference worker's unset budget fails in
    verl's prepare_micro_batches (None x SP). Each is refused naming its key; a budget nothing reads is not."""
    with pytest.raises(TypeError):
        verl_micro_batches([10, 20], budget=None)
    source = verl_source("workers/engine_workers.py")
    for assertion in ("assert self.config.actor.use_dynamic_bsz == self.config.rollout.log_prob_use_dynamic_bsz",
                      "assert self.config.rollout.log_prob_max_token_len_per_gpu is not None",
                      "assert self.config.actor.ppo_max_token_len_per_gpu is not None"):
        assert assertion in source
    actor, rollout, ref = (f"actor_rollout_ref.{s}" for s in ("actor", "rollout", "ref"))
    dynamic = [*SEVEN_B, DYNAMIC]
    (line,) = _refused([*dynamic, f"{actor}.ppo_max_token_len_per_gpu=null",
                        f"{rollout}.log_prob_max_token_len_per_gpu=16384"], tmp_path)
    assert line.startswith(f"{actor}.ppo_max_token_len_per_gpu=None: verl's ActorRolloutRefWorker.init_model asserts "
                           "it is set when actor.use_dynamic_bsz is true") and "at least 9216" in line
    (line,) = _refused([*dynamic, f"{rollout}.log_prob_max_token_len_per_gpu=null"], tmp_path)
    assert line.startswith(f"{rollout}.log_prob_max_token_len_per_gpu=None: verl's ActorRolloutRefWorker.init_model")
    (line,) = _refused([*dynamic, f"{actor}.ppo_max_token_len_per_gpu=0",
                        f"{rollout}.log_prob_max_token_len_per_gpu=16384"], tmp_path)
    assert line.startswith(f"{actor}.ppo_max_token_len_per_gpu=0: no sequence fits it")
    for actor_dynamic, rollout_dynamic in ((True, False), (False, True)):
        (line,) = _refused([*SEVEN_B, f"{actor}.use_dynamic_bsz={str(actor_dynamic).lower()}",
                            f"{rollout}.log_prob_use_dynamic_bsz={str(rollout_dynamic).lower()}"], tmp_path)
        assert line.startswith(f"{rollout}.log_prob_use_dynamic_bsz={rollout_dynamic}: actor_rollout_ref.actor."
                               f"use_dynamic_bsz is {actor_dynamic}")
    _run([*dynamic, f"{rollout}.log_prob_use_dynamic_bsz=true"], tmp_path)
    # fixed micro-batches read no budget
    _run([*SEVEN_B, f"{actor}.ppo_max_token_len_per_gpu=null", f"{rollout}.log_prob_max_token_len_per_gpu=null"],
         tmp_path)
    # the reference worker's (use_kl_loss), which LoRA leaves to the actor (verl's ref_in_actor): no ref worker then
    kl = [*dynamic, f"{actor}.use_kl_loss=true", f"{ref}.log_prob_max_token_len_per_gpu=null"]
    (line,) = _refused(kl, tmp_path)
    assert line.startswith(f"{ref}.log_prob_max_token_len_per_gpu=None: the reference worker sizes its micro-batches")
    _run([*kl, "actor_rollout_ref.model.lora_rank=32"], tmp_path)
    _run([*kl, f"{actor}.use_kl_loss=false"], tmp_path)
    # a reference worker on fixed micro-batches beside a dynamic actor: verl's validate_config skips the ref block
    # then, and the worker needs its per-GPU micro-batch
    assert "if not config.actor_rollout_ref.actor.use_dynamic_bsz:" in verl_source("utils/config.py")
    fixed_ref = [*dynamic, f"{actor}.use_kl_loss=true", f"{ref}.log_prob_use_dynamic_bsz=false"]
    (line,) = _refused([*fixed_ref, f"{ref}.log_prob_micro_batch_size_per_gpu=null"], tmp_path)
    assert line.startswith(f"{ref}.log_prob_micro_batch_size_per_gpu=None: verl's workers size this pass's "
                           "micro-batches by it alone"), line
    _run([*fixed_ref, f"{ref}.log_prob_micro_batch_size_per_gpu=4"], tmp_path)


def test_a_budget_below_prompt_plus_response_warns_as_verl_checks_real_lengths(tmp_path):
    """verl's rearrange_micro_batches asserts the budget x SP holds the longest *real* sequence of a GPU's batch (v1
    hands its workers nested tensors, no padding): a step of shorter sequences trains. So a budget below
    prompt + response is a warning note, not a refusal; budget x SP at prompt + response admits every length."""
    assert verl_micro_batches([400, 100, 300], budget=200, sp=2) == [400, 400]  # 400 tokens per micro-batch
    with pytest.raises(AssertionError, match="max_token_len must be greater than the sequence length"):
        verl_micro_batches([401, 100], budget=200, sp=2)
    budget = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    summary = _run([*SEVEN_B, DYNAMIC, f"{budget}=9215"], tmp_path).summary()  # T = 1024 + 8192 = 9216
    assert (f"warning: {budget}=9215 tokens < prompt + response = 9216: verl's rearrange_micro_batches stops the run "
            "at the first step with a sequence over 9215 tokens") in summary and "9216 admits every length" in summary
    # the rollout's budget follows the actor's (verl's rollout.yaml): warned too
    assert "warning: actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=9215 tokens" in summary
    assert "warning" not in _run([*SEVEN_B, DYNAMIC, f"{budget}=9216"], tmp_path).summary()
    # Ulysses SP 2: verl multiplies the per-GPU budget by SP (prepare_micro_batches)
    sp2 = [*SEVEN_B, DYNAMIC, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]
    assert "warning" not in _run([*sp2, f"{budget}=4608"], tmp_path).summary()
    assert f"warning: {budget}=4607 x Ulysses SP 2 = 9214 tokens" in _run([*sp2, f"{budget}=4607"], tmp_path).summary()


def test_a_fused_backend_verl_does_not_patch_is_refused_as_its_forward_has_no_log_probs(tmp_path):
    """verl's patch_forward_with_backends (on a tiny Llama here) gives the model a forward that returns log_probs for
    torch, liger (the torch kernel without liger-kernel) and triton, and skips any other value, leaving a forward
    whose output has no log_probs, which verl's engine reads: refused, naming the key and the valid values. verl's
    Triton kernel needs CUDA (it fails on CPU) and asserts hidden_size % 128 == 0."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from verl.models.transformers.monkey_patch import patch_forward_with_backends

    def verl_forward(backend):
        tiny = type("Tiny", (LlamaForCausalLM,), {})  # verl patches the model's class: a throwaway one
        model = tiny(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32))
        patch_forward_with_backends(model, use_fused_kernels=True, fused_kernels_backend=backend)
        return model(input_ids=torch.randint(0, 64, (1, 8)), return_dict=True)

    assert verl_forward("torch").log_probs.shape == (1, 8) and verl_forward("liger").log_probs.shape == (1, 8)
    assert not hasattr(verl_forward("fused"), "log_probs") and not hasattr(verl_forward(None), "log_probs")
    # tensors on the CPU: a CPU build of torch stops in its CUDA calls (RuntimeError), a CUDA build at the kernel's
    # `assert hidden.is_cuda` (AssertionError); either way the run cannot train there
    with pytest.raises((RuntimeError, AssertionError)):
        verl_forward("triton")
    assert "assert hidden_size % 128 == 0" in verl_source("utils/kernel/kernels.py")
    fused = [*SEVEN_B, "actor_rollout_ref.model.use_fused_kernels=true"]
    key = "actor_rollout_ref.model.fused_kernel_options.impl_backend"
    for value in ("fused", "null"):
        (line,) = _refused([*fused, f"{key}={value}"], tmp_path)
        shown = None if value == "null" else value
        assert line.startswith(f"{key}={shown}: verl patches the model's forward for fused kernels only with torch, "
                               "triton or liger") and "reads output.log_probs" in line
        assert line.endswith("set it to one of torch, triton, liger, or "
                             "actor_rollout_ref.model.use_fused_kernels=false")
    for value in ("torch", "triton", "liger"):
        _run([*fused, f"{key}={value}"], tmp_path)
    _run([*SEVEN_B, f"{key}=fused"], tmp_path)  # not read without fused kernels
    # triton: a hidden size that is not a multiple of 128 (config-only model, hidden 768 + 32), and on CPU
    odd = tmp_path / "odd"
    odd.mkdir()
    odd.joinpath("config.json").write_text(
        '{"vocab_size": 1024, "hidden_size": 800, "num_hidden_layers": 2, "num_attention_heads": 8,'
        ' "num_key_value_heads": 8, "max_position_embeddings": 32768, "intermediate_size": 1024}')
    (line,) = _refused([*fused, f"{key}=triton", f"actor_rollout_ref.model.path={odd}"], tmp_path)
    assert line.startswith(f"{key}=triton: the model's hidden size 800 is not a multiple of 128")
    _run([*fused, f"{key}=torch", f"actor_rollout_ref.model.path={odd}"], tmp_path)
    _maze_model(tmp_path / "data" / "maze" / "sft_model")
    cpu = ["backend=cpu", *_maze(), "actor_rollout_ref.model.use_fused_kernels=true"]
    (line,) = _refused([*cpu, f"{key}=triton"], tmp_path)
    assert line.startswith(f"{key}=triton: verl's Triton kernel (kernels.py efficient_entropy_forward) asserts CUDA")
    _run([*cpu, f"{key}=torch"], tmp_path)


def test_the_reference_worker_follows_ref_in_actor(tmp_path):
    """use_kl_loss needs reference log-probs: a reference worker computes them with the ref block's settings,
    unless LoRA has the actor compute them with its own (verl's v1 PPOTrainer._setup, ref_in_actor). The ref
    block's micro-batch is checked only where that worker runs."""
    kl = [*SEVEN_B, "actor_rollout_ref.actor.use_kl_loss=true"]
    lora = "actor_rollout_ref.model.lora_rank=32"
    micro = "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"
    (line,) = _refused([*kl, f"{micro}=3"], tmp_path)
    assert line.startswith(f"{micro}=3: each GPU computes log-probs of 128 samples")
    _run([*kl, f"{micro}=3", lora], tmp_path)
    _run([*SEVEN_B, f"{micro}=3"], tmp_path)  # no reference model


# ---------------------------------------------------------------- the rules as data, and their table in the docs


def test_each_rule_names_the_code_it_restates_and_the_docs_table_is_the_rules():
    """Every rule names its source and how it is checked, says when it refuses, and needs only rules before it;
    docs/slurm.md's preflight table is :func:`rules.table`, row for row (regenerate it when a rule changes)."""
    assert len({r.check for r in rules.RULES}) == len(rules.RULES) >= 19
    for i, r in enumerate(rules.RULES):
        assert r.source and r.how and (r.run.__doc__ or "").strip(), r.check
        assert set(r.needs) <= {earlier.check for earlier in rules.RULES[:i]}, r.check
    docs = (TESTS.parent / "docs" / "slurm.md").read_text().splitlines()
    table = rules.table()
    start = docs.index(table[0])
    assert docs[start:start + len(table) + 1] == [*table, ""]
