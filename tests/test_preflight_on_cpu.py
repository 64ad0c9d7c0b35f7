"""The launcher's preflight (fgrpo_verl/launch/preflight.py): verl's worker start-up checks and the fit of a run,
before submission. Each restated rule is pinned to verl's behaviour on the same config: verl's
``ActorRolloutRefWorker.init_model`` run in-process (TP x DP x PP vs world size), verl's ``prepare_micro_batches``
(micro-batches), TransferQueue in a real verl run (tests/test_rehearsal_on_cpu.py, e2e)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.config.compose import SharedComposer
from fgrpo_verl.integration.validation import validate
from fgrpo_verl.environment import environment_with
from fgrpo_verl.launch import plan_jobs, preflight
from fgrpo_verl.launch.recipe import load_recipe
from fgrpo_verl.config.paths import recipes_dir

TESTS = Path(__file__).resolve().parent
GIB = 2**30
# how an estimate refusal (the GPU-memory rules) ends: the documented way to submit anyway
HINT = "(an estimate: FGRPO_PREFLIGHT_MEMORY=warn submits anyway, docs/slurm.md)"

# One composer for the module, as the launcher composes a recipe's runs: Hydra composes each distinct list of
# config-group selections once, and each config's value overrides are applied to a copy with Hydra's own applier
# (tests/test_first_hour_on_cpu.py checks that this is Hydra's compose of all the overrides at once)
_COMPOSER = SharedComposer()


def compose(overrides=()):
    return _COMPOSER.compose(overrides)


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


def _rows(path: Path, rows: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"i": pa.array(range(rows), pa.int32())}), path)
    return path


def _maze_model(path: Path, preset: str = "paper") -> Path:
    from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    return save_model_dir(build_model(preset, tokenizer, 0), tokenizer, path)


def _run(overrides, workdir: Path, **kw):
    return preflight.run(compose(overrides), workdir, **kw)


def _refused(overrides, workdir: Path, **kw) -> list[str]:
    with pytest.raises(preflight.PreflightError) as err:
        _run(overrides, workdir, **kw)
    return str(err.value).splitlines()


def _maze(run: str = "n4-g0p0", *extra: str) -> list[str]:
    recipe = load_recipe("maze")
    (selected,) = recipe.select([run])
    return recipe.run_overrides(selected, list(extra))


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
    not divide it, and verl's own micro-batch split refuses it."""
    import torch
    from verl.utils import tensordict_utils as tu

    from fgrpo_verl.launch.preflight import _engine_utils

    def verl_split(rows, micro):
        batch = tu.get_tensordict({"x": torch.zeros(rows, 1)},
                                  non_tensor_dict={"use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro})
        return len(_engine_utils().prepare_micro_batches(batch)[0])

    with pytest.raises(AssertionError, match="data size must be divisible"):
        verl_split(1024, 4096)
    assert verl_split(1024, 1024) == 1 and verl_split(32768, 1024) == 32
    (line,) = _refused(_maze("n4-g0p0", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4096"), tmp_path)
    assert line.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4096: each GPU's share of a "
                           "mini-batch is 1024 samples") and line.endswith("e.g. 1024")
    (line,) = _refused(_maze("n4-g0p0", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4096"), tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4096: each GPU computes "
                           "log-probs of 1024 samples")
    # the shipped micro-batch (1,024) divides every N's share: N / 4 micro-batches per update
    assert "32768 samples per step, 32 micro-batch(es) of 1024 per GPU per update" in \
        _run(_maze("n128-g0p0"), tmp_path).summary()


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
#   START: vLLM's request_memory (its worker's start) with the free memory left beside the trainer's resident states
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
"""
SCHED = [(True, 8192, 32768, 512), (True, 65536, 32768, 512), (False, 8192, 32768, 40000),
         (False, 8192, 32768, 16384), (True, 8192, 32768, 40000)]
QKV = [(24, 6, 2), (24, 6, 4), (24, 6, 8), (24, 2, 8)]
# Qwen2.5-7B's 7.62e9 fp32 parameters over 16 GPUs (1.77 GiB each) on 80 GiB, at u = 0.97 and 0.98
QWEN7B_START_STATES = 7.62e9 * 4 / 16
START = [(80 * GIB, 80 * GIB - int(QWEN7B_START_STATES), util) for util in (0.97, 0.98)]


VLLM_VERDICT_TESTS = ("test_the_scheduler_rule_is_vllms", "test_without_chunked_prefill_verl_raises_the_token_budget_to_max_model_len",
                      "test_kv_heads_must_split_or_replicate_evenly_over_tp_as_vllms_attention_asserts",
                      "test_rollout_memory_follows_verls_phases")


@pytest.fixture(scope="module", autouse=True)
def fresh(request, tmp_path_factory):
    """This module's fresh processes (verl's init_model at TP 2 and 1; verl's and vLLM's own code on the numbers),
    started with the module's first test so that they run beside its in-process tests; each test waits for its
    own."""
    import side_by_side

    tests = side_by_side.selected_tests(request)
    commands, configs, workdir = {}, {}, None
    if tests.intersection(VLLM_VERDICT_TESTS):
        code = f"SCHED = {SCHED!r}\nQKV = {QKV!r}\nSTART = {START!r}\n" + VERL_VLLM_PROBE
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
    found: dict[str, list[list[str]]] = {"SCHED": [], "QKV": [], "START": []}
    for line in done.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        if kind in found:
            found[kind].append(rest.split(" ", 5 if kind == "SCHED" else 3))  # the verdict last, whole
    assert [len(v) for v in found.values()] == [len(SCHED), len(QKV), len(START)], \
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


# ---------------------------------------------------------------- lengths and memory


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


def test_memory_estimate_follows_its_formula(tmp_path):
    """The docstring's formula, computed here by hand for Qwen2.5-7B on 16 GPUs (published config values)."""
    config = compose(["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"])
    arch = preflight.architecture("Qwen/Qwen2.5-7B")
    est = preflight.estimate_memory(config, arch, 16)
    params, vocab, hidden, layers, kv_heads, head_dim = 7.62e9, 152064, 3584, 28, 4, 128
    assert (est.states_start, est.states_rollout, est.states_train) == \
        (pytest.approx(params * 4 / 16), pytest.approx(params * 12 / 16), pytest.approx(params * 16 / 16))
    assert est.activations == pytest.approx(4 * (1024 + 8192) * (4 * vocab + 2 * hidden * layers))
    assert est.vllm == pytest.approx(0.5 * 80 * GIB)
    assert est.vllm_weights == pytest.approx(2 * params / 2)
    assert est.kv_per_token == 2 * layers * (kv_heads // 2) * head_dim * 2
    seven_b = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"]

    def states(*extra):
        est = preflight.estimate_memory(compose([*seven_b, *extra]), arch, 16)
        return est.states_start * 16 / params, est.states_rollout * 16 / params, est.states_train * 16 / params

    # offload moves parameters / moments to the host between updates; verl loads them back for the update
    param_offload = "actor_rollout_ref.actor.fsdp_config.param_offload=true"
    optimizer_offload = "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"
    assert states(param_offload) == pytest.approx((0, 8, 16))
    assert states(optimizer_offload) == pytest.approx((4, 4, 16))
    assert states(param_offload, optimizer_offload) == pytest.approx((0, 0, 16))
    # FSDP2's CPUOffloadPolicy keeps them on the host throughout; FSDP1 does not read offload_policy
    policy = "actor_rollout_ref.actor.fsdp_config.offload_policy=true"
    assert states("backend=gpu_fsdp2", policy) == (0, 0, 0)
    assert states(policy) == pytest.approx((4, 12, 16))


def test_runs_that_cannot_fit_the_gpus_are_refused(tmp_path):
    seven_b = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler"]
    # one 80 GiB GPU: 7.62B x 16 B of FSDP states alone are 113.5 GiB
    lines = _refused([*seven_b, "cluster=1x1", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"], tmp_path)
    assert [line.split("=")[0] for line in lines] == ["actor_rollout_ref.rollout.gpu_memory_utilization",
                                                      "trainer.n_gpus_per_node"]
    assert "113.5 GiB FSDP states per GPU" in lines[1]
    assert "lower it" not in lines[0] and lines[0].endswith("use more GPUs, or set "
                                                             "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true "
                                                             + HINT)
    # states that leave vLLM little room (8 GiB GPUs): one consistent advice per key, never "raise" after "lower"
    lines = _refused([*seven_b, "cluster=2x8", "slurm.gpu_memory_gib=8"], tmp_path)
    utilization = [line for line in lines if line.startswith("actor_rollout_ref.rollout.gpu_memory_utilization")]
    assert utilization and not any("raise gpu_memory_utilization" in line for line in utilization), utilization
    # vLLM's share beside the rollout's states: 0.95 x 80 + 5.3 > 80
    (line,) = _refused([*seven_b, "cluster=2x8", "actor_rollout_ref.rollout.gpu_memory_utilization=0.95"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.gpu_memory_utilization=0.95: from the second step on, vLLM's "
                           "76.0 GiB wake (free_cache_engine) beside 5.3 GiB per GPU of fp32 parameters and AdamW "
                           "moments")
    # a smaller GPU, the same run: slurm.gpu_memory_gib is the cluster's GPU memory
    lines = _refused([*seven_b, "cluster=2x8", "slurm.gpu_memory_gib=24"], tmp_path)
    assert any(line.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4: a training step needs")
               for line in lines), lines
    # vLLM's KV cache must hold one max_model_len sequence (Llama-3.2-3B: 131,072 positions by default)
    llama = ["algo=grpo", "base_model=llama32_3b_instruct", "dataset=deepscaler", "cluster=2x8",
             "actor_rollout_ref.rollout.gpu_memory_utilization=0.15"]
    (line,) = _refused(llama, tmp_path)
    assert "holds fewer than max_model_len=131072 tokens" in line
    assert "max_model_len=9216" in line
    _run([*llama, "actor_rollout_ref.rollout.max_model_len=9216"], tmp_path)


def test_rollout_memory_follows_verls_phases(tmp_path, verl_vllm_verdicts):
    """Qwen2.5-7B on 2 x 8 GPUs of 80 GiB (7.62e9 parameters): vLLM starts beside the fp32 parameters only (1.8 GiB
    per GPU), and from the second step its KV cache wakes beside parameters and AdamW moments (5.3 GiB; the 1.8 GiB
    of gradients are freed when an update ends). u = 0.92 fits both (it did not fit beside all 7.1 GiB of states);
    u = 0.93 is the largest that fits the rollout, 0.94 is not; 0.97 starts but cannot wake; 0.98 does not start,
    as vLLM's own request_memory says on the same numbers."""
    seven_b = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"]
    util = "actor_rollout_ref.rollout.gpu_memory_utilization"
    assert "5.3 GiB" not in _run([*seven_b, f"{util}=0.92"], tmp_path).summary()
    assert "79.7 GiB rollout of 80 GiB per GPU" in _run([*seven_b, f"{util}=0.93"], tmp_path).summary()
    for value in (0.94, 0.97):
        (line,) = _refused([*seven_b, f"{util}={value}"], tmp_path)
        assert line.startswith(f"{util}={value}: from the second step on") and "verl frees the gradients" in line
        assert line.endswith("lower it to 0.93 or less, use more GPUs, or set "
                             "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true " + HINT), line
    starts, refused = verl_vllm_verdicts["START"]
    assert starts[-1] == "accepted" and refused[-1].startswith("refused Free memory on device")
    (line,) = _refused([*seven_b, f"{util}=0.98"], tmp_path)
    assert line.startswith(f"{util}=0.98: vLLM starts (verl's LLMServerManager.create, after the actor's init_model) "
                           "beside 1.8 GiB per GPU of fp32 parameters") and "request_memory refuses" in line
    # the moments on the host between updates: 0.97 x 80 + 1.8 fits the rollout too
    _run([*seven_b, f"{util}=0.97", "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"], tmp_path)


def test_offload_does_not_shrink_the_update(tmp_path):
    """Qwen2.5-7B on one 80 GiB GPU: verl's param and optimizer offload move the 113.5 GiB of FSDP states to the
    host between updates but back for each update, which cannot fit; FSDP2's offload_policy keeps them on the host
    (the update streams them), and that fits. FSDP1 ignores offload_policy."""
    one = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=1x1",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
           "actor_rollout_ref.actor.fsdp_config.param_offload=true",
           "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"]
    (line,) = _refused(one, tmp_path)
    assert line.startswith("trainer.n_gpus_per_node=1: a training step needs at least 141.3 GiB per GPU (113.5 GiB "
                           "FSDP states per GPU") and "even with param/optimizer offload" in line
    assert line.endswith("or FSDP2's CPU offload (backend=gpu_fsdp2 with "
                         "actor_rollout_ref.actor.fsdp_config.offload_policy=true) " + HINT)
    policy = "actor_rollout_ref.actor.fsdp_config.offload_policy=true"
    assert "27.8 GiB training" in _run([*one, "backend=gpu_fsdp2", policy], tmp_path).summary()
    _refused([*one, policy], tmp_path)


def test_the_states_follow_the_model_dtype_and_lora(tmp_path):
    """Qwen2.5-7B on 2 GPUs: fp32 states (16 B/param in the update) do not fit; verl's fsdp_config.model_dtype=bf16
    halves every state (gradients and AdamW moments take the parameters' dtype), and LoRA leaves the frozen base
    weights without gradients or moments: both fit."""
    two = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=1x8", "trainer.n_gpus_per_node=2",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    lines = _refused(two, tmp_path)
    assert any("42.6 GiB per GPU of fp32 parameters and AdamW moments" in line for line in lines), lines
    bf16 = _run([*two, "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16"], tmp_path).summary()
    # update: 7.62B x (2 + 2 + 4) B / 2 GPUs = 28.4 GiB of states + 27.8 GiB for a micro-batch
    assert "memory >= 56.2 GiB training / 61.3 GiB rollout" in bf16, bf16
    lora = _run([*two, "actor_rollout_ref.model.lora_rank=32"], tmp_path).summary()
    # fp32 base weights alone, 14.2 GiB per GPU, in every phase
    assert "memory >= 42.0 GiB training / 54.2 GiB rollout" in lora, lora


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
            summary = preflight.run(compose(recipe.run_overrides(run)), tmp_path).summary()
            assert "memory >= " in summary and "TransferQueue holds at most" in summary, (name, run.name, summary)
            checked.append((name, run.name))
    assert len(checked) >= 36 + 6 + 3 + 18 and len(set(checked)) == len(checked)


def test_the_3b_and_4b_models_run_one_gpu_per_replica_and_fit(tmp_path):
    """TP 1 (16 replicas on 2 x 8 H100): vLLM's share (0.5 x 80 GiB) less the bf16 weights holds this many
    full-length (prompt 1024 + response) sequences per replica; the training step fits too."""
    for model, path, response in (("qwen3_4b_base", "Qwen/Qwen3-4B-Base", 4096),
                                  ("llama32_3b_instruct", "meta-llama/Llama-3.2-3B-Instruct", 8192)):
        arch = preflight.architecture(path)
        kv_token = 2 * arch.num_hidden_layers * arch.num_key_value_heads * arch.head_dim * 2
        at_once = int((0.5 * 80 * GIB - 2 * arch.params) // (kv_token * (1024 + response)))
        summary = _run(["algo=grpo", f"base_model={model}", "dataset=deepscaler", "cluster=2x8"], tmp_path).summary()
        assert "16 rollout replica(s) of TP 1" in summary
        assert f"KV cache holds {at_once} full-length sequences at once" in summary, summary


# ---------------------------------------------------------------- where the preflight runs


def test_dry_run_prints_each_runs_preflight(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert cli_main(["launch", "maze", "--dry-run", "--only", "n128-g0p5"]) == 3
    out = capsys.readouterr().out
    # the summary names each distinct preflight once, beside the run it is about
    assert "n128-g0p5: preflight: 1 rollout replica(s) of TP 1 x DP 1 x PP 1 on 1 GPU(s); 32768 samples per step" in out


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
    monkeypatch.chdir(tmp_path)
    assert cli_main(["doctor", "--no-ray", "--recipe", "maze", "--only", "n4-g0p0"]) == 0
    assert "[ok]   preflight (recipe maze, 1 run)" in capsys.readouterr().out
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

SEVEN_B = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"]
DYNAMIC = "actor_rollout_ref.actor.use_dynamic_bsz=true"
QWEN7B = dict(vocab=152064, hidden=3584, layers=28)  # Qwen2.5-7B's published config.json


def _verl_micro_batches(lengths: list[int], budget, sp: int = 1) -> list[int]:
    """verl's own ``prepare_micro_batches`` with dynamic batch sizes on one GPU's batch of sequences of these real
    lengths (nested, as verl's v1 trainer hands them to its workers), budget ``max_token_len_per_gpu`` and Ulysses
    SP ``sp``: the tokens of each micro-batch it makes."""
    import torch
    from verl.utils import tensordict_utils as tu

    ids = torch.nested.nested_tensor([torch.zeros(n, dtype=torch.long) for n in lengths], layout=torch.jagged)
    batch = tu.get_tensordict({"input_ids": ids}, non_tensor_dict={
        "use_dynamic_bsz": True, "max_token_len_per_gpu": budget, "sp_size": sp})
    micro, _ = preflight._engine_utils().prepare_micro_batches(batch)
    return [int(m["input_ids"].offsets().diff().sum()) for m in micro]


def _verl_source(relative: str) -> str:
    import verl

    return (Path(verl.__path__[0]) / relative).read_text()


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
        _verl_micro_batches([10, 20], None)
    source = _verl_source("workers/engine_workers.py")
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
    # then, and the worker's ActorConfig asserts a micro-batch size
    assert "if not config.actor_rollout_ref.actor.use_dynamic_bsz:" in _verl_source("utils/config.py")
    assert "if use_dynamic_bsz is not enabled" in _verl_source("workers/config/actor.py")
    fixed_ref = [*dynamic, f"{actor}.use_kl_loss=true", f"{ref}.log_prob_use_dynamic_bsz=false"]
    (line,) = _refused([*fixed_ref, f"{ref}.log_prob_micro_batch_size_per_gpu=null"], tmp_path)
    assert line.startswith(f"{ref}.log_prob_micro_batch_size_per_gpu=None: the reference worker computes its "
                           "log-probs in fixed micro-batches"), line
    _run([*fixed_ref, f"{ref}.log_prob_micro_batch_size_per_gpu=4"], tmp_path)


def test_a_budget_below_prompt_plus_response_warns_as_verl_checks_real_lengths(tmp_path):
    """verl's rearrange_micro_batches asserts the budget x SP holds the longest *real* sequence of a GPU's batch (v1
    hands its workers nested tensors, no padding): a step of shorter sequences trains. So a budget below
    prompt + response is a warning note, not a refusal; budget x SP at prompt + response admits every length."""
    assert _verl_micro_batches([400, 100, 300], 200, sp=2) == [400, 400]  # 200 x 2 = 400 tokens per micro-batch
    with pytest.raises(AssertionError, match="max_token_len must be greater than the sequence length"):
        _verl_micro_batches([401, 100], 200, sp=2)
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


def test_dynamic_batch_sizes_activations_are_a_micro_batch_packed_to_its_budget(tmp_path):
    """verl packs a micro-batch up to budget x SP tokens (shorter sequences fill it: 64 of 512 tokens make two full
    micro-batches, where full-length ones make one each), and Ulysses gives each GPU 1/SP of them. The estimate's
    micro-batch: min(budget x SP, the GPU's samples x T) tokens over SP GPUs, not ppo_micro_batch_size_per_gpu x T."""
    assert _verl_micro_batches([512] * 64, 8192, sp=2) == [16384, 16384]
    assert _verl_micro_batches([9216] * 4, 8192, sp=2) == [9216] * 4
    arch = preflight.architecture("Qwen/Qwen2.5-7B")
    v, h, layers = QWEN7B["vocab"], QWEN7B["hidden"], QWEN7B["layers"]
    budget = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"

    def found(*extra):
        return {p.name: p for p in preflight.passes(compose([*SEVEN_B, DYNAMIC, *extra]), arch, 16)}

    # SP 2: 8 data-parallel groups, 64 samples each per mini-batch; 8192 x 2 tokens per micro-batch, 8192 per GPU
    update = found(f"{budget}=8192", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")["update"]
    assert (update.key, update.tokens, update.budget) == (budget, 8192, True)
    assert update.activations == 8192 * (4 * v + 2 * h * layers)
    # a mini-batch share under the budget: 2 prompts x 8 samples / 16 GPUs = 1 sample of 9,216 tokens
    small = found("actor_rollout_ref.actor.ppo_mini_batch_size=2")
    assert small["update"].tokens == 9216
    assert small["log-prob"].tokens == 16384  # 2,048 / 16 = 128 samples: the rollout's budget binds
    assert small["log-prob"].activations == 16384 * 2 * v
    # the bound: 90,000 tokens fit the update on 80 GiB (7.1 GiB of states), 100,000 do not, with SP 1 or 2 (the
    # budget is per GPU)
    assert "memory >= 74.9 GiB training" in _run([*SEVEN_B, DYNAMIC, f"{budget}=90000"], tmp_path).summary()
    for sp in (1, 2):
        (line,) = _refused([*SEVEN_B, DYNAMIC, f"{budget}=100000",
                            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}"], tmp_path)
        assert line.startswith(f"{budget}=100000: a training step needs at least 82.4 GiB per GPU"), line
        assert "75.3 GiB for one update micro-batch packed to its token budget (100000 tokens per GPU)" in line
        assert line.endswith("lower it, or set actor_rollout_ref.model.use_fused_kernels=true " + HINT), line


def _peak_bytes(fn) -> int:
    """The most CPU memory ``fn`` holds at once beyond what existed before it, from torch's memory profiler (every
    allocation and free of the CPU allocator, in order)."""
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action, MemoryProfile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        fn()
    held = peak = 0
    for _, action, _, size in MemoryProfile(prof.profiler.kineto_results).timeline:
        held += size if action == Action.CREATE else -size if action == Action.DESTROY else 0
        peak = max(peak, held)
    return peak


def test_verls_fused_torch_kernel_holds_what_the_estimate_counts():
    """verl's FusedLinearForPPO (the torch backend, and liger where liger-kernel is not installed: verl falls back to
    the torch kernel) on CPU in bf16, 4 chunks of 512 tokens, a small vocabulary and hidden size (so that the chunk's
    arrays dominate): its peak is the estimate's chunk term, 12 / 20 / 28 B per chunk x V element (log-probs, update,
    update with the entropy in the loss), to within 1 %."""
    import torch
    from verl.utils.experimental import torch_functional

    tokens, hidden, vocab = 4 * preflight.FUSED_CHUNK, 8, 4096
    torch.manual_seed(0)
    states = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    weights = torch.randn(vocab, hidden, dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (tokens,))

    def infer(backend):
        with torch.no_grad():
            torch_functional.FusedLinearForPPO(impl_backend=backend).forward(states, weights, labels)

    def train(backend, entropy):
        h, w = states.detach().requires_grad_(True), weights.detach().requires_grad_(True)
        log_probs, entropies = torch_functional.FusedLinearForPPO(impl_backend=backend).forward(h, w, labels)
        (log_probs.sum() + (0.0 * entropies.sum() if entropy else 0.0)).backward()  # verl: - entropy_coeff x entropy

    backends = ["torch"]
    if torch_functional._LIGER_FUSED_LINEAR_SCALED_CROSS_ENTROPY is None:
        backends.append("liger")  # runs the torch kernel
        liger = compose([*SEVEN_B, "actor_rollout_ref.model.use_fused_kernels=true",
                         "actor_rollout_ref.model.fused_kernel_options.impl_backend=liger"])
        assert preflight.lm_head(liger) == "torch"
    for backend in backends:
        for measured, (train_pass, entropy) in ((_peak_bytes(lambda: infer(backend)), (False, False)),
                                                (_peak_bytes(lambda: train(backend, False)), (True, False)),
                                                (_peak_bytes(lambda: train(backend, True)), (True, True))):
            counted = preflight.head_bytes("torch", tokens, vocab, train_pass, entropy)
            assert counted <= measured <= 1.01 * counted, (backend, train_pass, entropy, measured / counted)
    # the chunk term does not grow with the micro-batch: 512 tokens at a time
    assert preflight.head_bytes("torch", 100_000, vocab, True) == preflight.head_bytes("torch", 512, vocab, True)


def test_fused_kernels_count_the_lm_head_in_chunks_not_the_micro_batchs_logits(tmp_path):
    """Qwen2.5-7B on 24 GiB GPUs: the bf16 logits of 4 x 9,216 tokens (and their gradient) do not fit beside the
    states; verl's fused kernels never hold them: torch in 512-token chunks (28 B per element with the entropy in the
    loss), triton a d_logits of 9,504 columns per token. The hidden states stay."""
    arch = preflight.architecture("Qwen/Qwen2.5-7B")
    v, h, layers = QWEN7B["vocab"], QWEN7B["hidden"], QWEN7B["layers"]
    fused = "actor_rollout_ref.model.use_fused_kernels=true"
    backend = "actor_rollout_ref.model.fused_kernel_options.impl_backend"
    t = 4 * 9216
    for extra, head in ((["actor_rollout_ref.actor.entropy_coeff=0"], 512 * v * 20),
                        (["actor_rollout_ref.actor.entropy_coeff=0.001"], 512 * v * 28),
                        ([f"{backend}=triton"], t * 9504 * 2)):
        (update,) = [p for p in preflight.passes(compose([*SEVEN_B, fused, *extra]), arch, 16) if p.name == "update"]
        assert update.tokens == t and update.activations == t * 2 * h * layers + head, extra
    small = [*SEVEN_B, "slurm.gpu_memory_gib=24"]
    (line,) = _refused(small, tmp_path)
    assert line.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4: a training step needs at least "
                           "34.9 GiB per GPU") and line.endswith(HINT)
    assert "memory >= 15.4 GiB training" in _run([*small, fused], tmp_path).summary()
    assert "memory >= 14.6 GiB training" in _run([*small, fused, f"{backend}=triton"], tmp_path).summary()
    # the bound with fused kernels: 15.4 GiB fits 16 GiB, not 15 (a KV cache that holds one 9,216-token sequence)
    fits = [*SEVEN_B, fused, "actor_rollout_ref.rollout.max_model_len=9216"]
    _run([*fits, "slurm.gpu_memory_gib=16"], tmp_path)
    (line,) = _refused([*fits, "slurm.gpu_memory_gib=15"], tmp_path)
    assert line.startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4: a training step needs at least "
                           "15.4 GiB per GPU") and line.endswith("or shorten the sequences " + HINT)


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
    assert "assert hidden_size % 128 == 0" in _verl_source("utils/kernel/kernels.py")
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
    block's micro-batch is checked, and its pass counted in the memory estimate, only where that worker runs."""
    kl = [*SEVEN_B, "actor_rollout_ref.actor.use_kl_loss=true"]
    lora = "actor_rollout_ref.model.lora_rank=32"
    micro = "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"
    (line,) = _refused([*kl, f"{micro}=3"], tmp_path)
    assert line.startswith(f"{micro}=3: each GPU computes log-probs of 128 samples")
    _run([*kl, f"{micro}=3", lora], tmp_path)
    _run([*SEVEN_B, f"{micro}=3"], tmp_path)  # no reference model
    # all 128 samples of a GPU in one reference micro-batch: 128 x 9,216 tokens of bf16 logits
    (line,) = _refused([*kl, f"{micro}=128"], tmp_path)
    assert line.startswith(f"{micro}=128: a training step needs at least") and \
        "for one reference log-prob micro-batch of full-length sequences (1179648 tokens per GPU)" in line
    _run([*kl, f"{micro}=128", lora], tmp_path)


# ---------------------------------------------------------------- FGRPO_PREFLIGHT_MEMORY: submitting past an estimate


def test_an_estimate_refusal_says_how_to_submit_anyway_and_warn_submits_it(tmp_path, monkeypatch):
    """Over the memory estimate (Qwen2.5-7B on 24 GiB GPUs) the refusal ends with how to submit anyway;
    FGRPO_PREFLIGHT_MEMORY=warn in the job's environment (this process's, or a recipe's env:) submits it with a note
    that keeps the numbers. Unset, blank or refuse refuses; any other value is refused, naming the variable."""
    over = [*SEVEN_B, "slurm.gpu_memory_gib=24"]
    head = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4: a training step needs at least 34.9 GiB per GPU"
    (line,) = _refused(over, tmp_path)
    assert line.startswith(head) and line.endswith(HINT)
    summary = _run(over, tmp_path, env={"FGRPO_PREFLIGHT_MEMORY": "warn"}).summary()
    assert summary.startswith(f"preflight: {head}") and HINT not in summary
    assert "> 24 GiB (slurm.gpu_memory_gib); over the estimate; submitted because FGRPO_PREFLIGHT_MEMORY=warn" in \
        summary
    for value in ("refuse", "", " "):
        (line,) = _refused(over, tmp_path, env={"FGRPO_PREFLIGHT_MEMORY": value})
        assert line.startswith(head)
    (line,) = _refused(SEVEN_B, tmp_path, env={"FGRPO_PREFLIGHT_MEMORY": "yes"})
    assert line == ("FGRPO_PREFLIGHT_MEMORY='yes': not one of its values (refuse, warn, or unset); unset it, or set "
                    "FGRPO_PREFLIGHT_MEMORY=warn to submit a run over the memory estimate")
    # the launcher's check with a recipe's env:, and the job's own environment (jobenv)
    status, text = preflight.check_run(compose(over), str(tmp_path), env={"FGRPO_PREFLIGHT_MEMORY": "warn"})
    assert status == "ok" and "submitted because FGRPO_PREFLIGHT_MEMORY=warn" in text
    monkeypatch.setenv("FGRPO_PREFLIGHT_MEMORY", "warn")
    assert "submitted because FGRPO_PREFLIGHT_MEMORY=warn" in _run(over, tmp_path).summary()
    monkeypatch.delenv("FGRPO_PREFLIGHT_MEMORY")
    # a recipe's env: as fgrpo-verl launch plans it (the preflight in the launcher's validator process)
    recipe = tmp_path / "tight.yaml"
    body = ("name: tight\nproject: fgrpo-tight\n{env}common: [algo=grpo, base_model=qwen25_7b, dataset=deepscaler, "
            "cluster=2x8, slurm.gpu_memory_gib=24]\nruns:\n  - {{name: r, overrides: []}}\n")
    recipe.write_text(body.format(env=""))
    with pytest.raises(ValueError) as err:
        plan_jobs(str(recipe), None, [], tmp_path / "logs", tmp_path)
    assert str(err.value).startswith(f"recipe tight, run r: {head}") and str(err.value).endswith(HINT)
    recipe.write_text(body.format(env="env: {FGRPO_PREFLIGHT_MEMORY: warn}\n"))
    (job,) = plan_jobs(str(recipe), None, [], tmp_path / "logs", tmp_path)[1]
    assert job.preflight.startswith(f"preflight: {head}") and "submitted because FGRPO_PREFLIGHT_MEMORY=warn" in \
        job.preflight


@pytest.mark.parametrize("certain", [
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",  # mini-batch divisibility
    "actor_rollout_ref.rollout.tensor_model_parallel_size=3",  # TP x DP x PP vs the GPUs
    "actor_rollout_ref.rollout.tensor_model_parallel_size=16",  # attention heads vs TP
    "transfer_queue.backend.SimpleStorage.total_storage_size=1000",  # TransferQueue capacity
])
def test_warn_never_submits_past_a_certain_rule(tmp_path, certain):
    """A run over the memory estimate that also breaks a certain rule: FGRPO_PREFLIGHT_MEMORY=warn lets the estimate
    through and still refuses the certain rule, whose line offers no bypass."""
    both = [*SEVEN_B, "slurm.gpu_memory_gib=24", certain]
    lines = _refused(both, tmp_path)
    estimates = [line for line in lines if line.endswith(HINT)]
    assert estimates and len(estimates) < len(lines), lines
    with pytest.raises(preflight.PreflightError) as err:
        _run(both, tmp_path, env={"FGRPO_PREFLIGHT_MEMORY": "warn"})
    assert err.value.refusals and not any(r.estimate for r in err.value.refusals)
    assert str(err.value).splitlines() == [line for line in lines if not line.endswith(HINT)]
