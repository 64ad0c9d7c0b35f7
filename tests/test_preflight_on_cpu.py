"""The launcher's preflight (fgrpo_verl/launch/preflight.py): verl's worker start-up checks and the fit of a run,
before submission. Each restated rule is pinned to verl's behaviour on the same config: verl's
``ActorRolloutRefWorker.init_model`` run in-process (TP x DP x PP vs world size), verl's ``prepare_micro_batches``
(micro-batches), TransferQueue in a real verl run (tests/test_rehearsal_on_cpu.py, e2e)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.config.compose import compose
from fgrpo_verl.integration.validation import validate
from fgrpo_verl.environment import environment_with
from fgrpo_verl.launch import plan_jobs, preflight
from fgrpo_verl.launch.recipe import load_recipe
from fgrpo_verl.config.paths import recipes_dir

TESTS = Path(__file__).resolve().parent
GIB = 2**30

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


def test_the_tp_rule_is_verls_init_model_assert(tmp_path):
    """The same maze config (2f836bb's TP 2 on its one GPU, on the CPU backend with a stand-in model): verl's own
    ``ActorRolloutRefWorker.init_model`` refuses it, in-process, and so does the preflight; with TP 1 both accept."""
    from rehearsal import standin_maze

    env = standin_maze(tmp_path / "maze", n_train=2)
    results = {}
    for tp in (2, 1):
        overrides = ["backend=cpu", *_maze("n4-g0p0"), f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}"]
        with environment_with(env):
            config = compose(overrides)
            OmegaConf.resolve(config)
        path = tmp_path / f"tp{tp}.yaml"
        OmegaConf.save(config, path)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        job_env = dict(os.environ, **{k: str(v) for k, v in config.ray_kwargs.ray_init.runtime_env.env_vars.items()},
                       RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        done = subprocess.run([sys.executable, str(TESTS / "verl_init_probe.py"), str(path)], env=job_env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        verdict = [line for line in done.stdout.splitlines() if line.startswith("INIT ")]
        try:
            preflight.run(config, tmp_path)
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


def test_the_scheduler_rule_is_vllms(tmp_path):
    """vLLM's own SchedulerConfig (vLLM's CPU build, the Makefile installs it) on the maze's engine settings, in a
    subprocess (importing vLLM here would leave it imported for later tests): it refuses fewer tokens per step than
    sequences, as the preflight does, and takes the recipe's 65,536 for 32,768 sequences."""
    code = (
        "import sys\n"
        "from vllm.config import SchedulerConfig\n"
        "for tokens in (8192, 65536):\n"
        "    try:\n"
        "        SchedulerConfig(max_num_batched_tokens=tokens, max_num_seqs=32768, max_model_len=512,\n"
        "                        is_encoder_decoder=False)\n"
        "        print(tokens, 'accepted')\n"
        "    except Exception as exc:\n"
        "        print(tokens, 'refused', ' '.join(str(exc).split()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("8192 ", "65536 "))]
    assert len(verdicts) == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert verdicts[0].startswith("8192 refused") and \
        "max_num_batched_tokens (8192) must be greater than or equal to max_num_seqs (32768)" in verdicts[0]
    assert verdicts[1] == "65536 accepted"
    (line,) = _refused([*_maze(), "actor_rollout_ref.rollout.max_num_batched_tokens=8192"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.max_num_batched_tokens=8192: ")
    _run(_maze(), tmp_path)


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


def test_memory_estimate_follows_its_formula(tmp_path):
    """The docstring's formula, computed here by hand for Qwen2.5-7B on 16 GPUs (published config values)."""
    config = compose(["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8"])
    arch = preflight.architecture("Qwen/Qwen2.5-7B")
    est = preflight.estimate_memory(config, arch, 16)
    params, vocab, hidden, layers, kv_heads, head_dim = 7.62e9, 152064, 3584, 28, 4, 128
    assert est.states == pytest.approx(params * 16 / 16)
    assert est.activations == pytest.approx(4 * (1024 + 8192) * (4 * vocab + 2 * hidden * layers))
    assert est.vllm == pytest.approx(0.5 * 80 * GIB)
    assert est.vllm_weights == pytest.approx(2 * params / 2)
    assert est.kv_per_token == 2 * layers * (kv_heads // 2) * head_dim * 2
    # offloading moves the states to the host
    offload = compose(["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8",
                       "actor_rollout_ref.actor.fsdp_config.param_offload=true",
                       "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"])
    assert preflight.estimate_memory(offload, arch, 16).states == 0


def test_runs_that_cannot_fit_the_gpus_are_refused(tmp_path):
    seven_b = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler"]
    # one 80 GiB GPU: 7.62B x 16 B of FSDP states alone are 113.5 GiB
    lines = _refused([*seven_b, "cluster=1x1", "actor_rollout_ref.rollout.tensor_model_parallel_size=1"], tmp_path)
    assert [line.split("=")[0] for line in lines] == ["actor_rollout_ref.rollout.gpu_memory_utilization",
                                                      "trainer.n_gpus_per_node"]
    assert "113.5 GiB FSDP states per GPU" in lines[1]
    assert "lower it" not in lines[0] and lines[0].endswith("use more GPUs, or set "
                                                             "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true")
    # states that leave vLLM little room (8 GiB GPUs): one consistent advice per key, never "raise" after "lower"
    lines = _refused([*seven_b, "cluster=2x8", "slurm.gpu_memory_gib=8"], tmp_path)
    utilization = [line for line in lines if line.startswith("actor_rollout_ref.rollout.gpu_memory_utilization")]
    assert utilization and not any("raise gpu_memory_utilization" in line for line in utilization), utilization
    # vLLM's share beside the states: 0.95 x 80 + 7.1 > 80
    (line,) = _refused([*seven_b, "cluster=2x8", "actor_rollout_ref.rollout.gpu_memory_utilization=0.95"], tmp_path)
    assert line.startswith("actor_rollout_ref.rollout.gpu_memory_utilization=0.95: vLLM claims 76.0 GiB next to the "
                           "7.1 GiB FSDP states")
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
    assert cli_main(["launch", "maze", "--dry-run", "--only", "n128-g0p5"]) == 0
    out = capsys.readouterr().out
    assert "### preflight: 1 rollout replica(s) of TP 1 x DP 1 x PP 1 on 1 GPU(s); 32768 samples per step" in out


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
