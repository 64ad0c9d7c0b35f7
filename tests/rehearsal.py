"""The recipe rehearsal (tests/test_rehearsal_on_cpu.py): a shipped recipe run, started through verl on this
machine's CPUs with the config the cluster job would run, scaled only where the machine forces it.

:func:`rehearsal` composes the run as ``fgrpo-verl launch`` does (``cluster``), then again with the rollout
backend of this machine (:data:`BACKEND`: ``cpu_vllm``, verl's vLLM rollout on vLLM's CPU build, where it ships;
``cpu``, the ``hf`` rollout, with FGRPO_REHEARSAL_BACKEND=cpu) and

kept from the cluster config (re-set after the backend, which would change them):
    rollout tensor / data / pipeline parallel sizes (so the replica layout), rollout.n, updates per step
    (train batch / mini-batch), micro-batches per GPU per update and per log-prob pass (their count),
    validation in batches (data.val_batch_size), transfer_queue's num_data_storage_units,
    data.max_prompt_length, every algorithm, loss, optimizer and reward setting of the recipe (its overrides
    are applied unchanged), the data format and, for the maze, the data lengths and paths
scaled down (docs/slurm.md "Rehearsal"):
    GPUs: W -> min(W, 2) logical GPUs on one node (the parallel sizes must divide it);
    prompts per step: the fewest that keep the above; validation: 2 held-out prompts (1 per batch where the
    recipe batches validation), 16 samples each (val_kwargs.n; verl's agent loop takes ~0.1 s per sample here);
    TransferQueue's total_storage_size: the preflight's bound for the scaled run (the tightest it accepts);
    the model: a stand-in of the same family and tokenizer kind; LLM responses: 64 tokens;
    one training step, validated after it (val_before_train off: once, when TransferQueue is fullest);
    W&B off (console and verl's file logger)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

# the machine's logical GPUs (Ray bundles of the CPU backend)
MAX_GPUS = 2
LLM_RESPONSE_TOKENS = 64
# samples per held-out prompt: verl's agent loop costs ~0.1 s per sample on 2 cores (2,048 took 224 s)
VAL_SAMPLES = 16


def _default_backend() -> str:
    """``cpu_vllm`` (verl's vLLM rollout, the engine of the cluster runs) where that backend ships, else ``cpu``
    (the ``hf`` rollout)."""
    from fgrpo_verl.config.paths import config_dir

    return "cpu_vllm" if (config_dir() / "backend" / "cpu_vllm.yaml").is_file() else "cpu"


# the rollout backend of the rehearsal (hydra_configs/backend/<name>.yaml): one parameter, FGRPO_REHEARSAL_BACKEND
BACKEND = os.environ.get("FGRPO_REHEARSAL_BACKEND") or _default_backend()


@dataclass
class Rehearsal:
    recipe: str
    run: str
    overrides: list[str]
    env: dict[str, str]
    cluster: object  # the composed cluster config
    kept: dict[str, object] = field(default_factory=dict)
    scaled: dict[str, tuple[object, object]] = field(default_factory=dict)


def _get(config, key: str):
    from omegaconf import OmegaConf

    return OmegaConf.select(config, key)


def _divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, n + 1) if n % d == 0 and d <= max(1, limit))


def scale(cluster, gpus: int) -> dict[str, int]:
    """The scaled batch keys for ``gpus`` GPUs: the fewest prompts per step that keep the cluster's updates per
    step and micro-batches per GPU per update (module docstring)."""
    n = int(cluster.actor_rollout_ref.rollout.n)
    train = int(cluster.data.train_batch_size)
    mini = int(cluster.actor_rollout_ref.actor.ppo_mini_batch_size)
    world = int(cluster.trainer.nnodes) * int(cluster.trainer.n_gpus_per_node)
    updates = train // mini
    micro = int(cluster.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)
    per_gpu = mini * n // world
    count = max(1, per_gpu // micro)
    for prompts in range(updates, train + 1, updates):
        mini_r = prompts // updates
        if (mini_r * n) % gpus:
            continue
        per_gpu_r = mini_r * n // gpus
        if per_gpu_r % count == 0:
            break
    else:
        raise ValueError(f"no scaled batch keeps {updates} updates per step on {gpus} GPU(s)")
    rows_r = prompts * n // gpus
    out = {
        "data.train_batch_size": prompts,
        "actor_rollout_ref.actor.ppo_mini_batch_size": mini_r,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": per_gpu_r // count,
    }
    rows = train * n // world
    for section in ("rollout", "ref"):
        key = f"actor_rollout_ref.{section}.log_prob_micro_batch_size_per_gpu"
        value = _get(cluster, key)
        if value is not None:
            passes = max(1, rows // int(value))
            out[key] = _divisor_at_most(rows_r, rows_r // passes)
    return out


def rehearsal(recipe_name: str, run_name: str, workdir: Path, model_path: str | None, env: dict[str, str],
              backend: str = BACKEND, scaled_also: dict[str, object] | None = None) -> Rehearsal:
    """The rehearsal of ``run_name`` of ``recipe_name``: its overrides and what it keeps and scales.

    ``env`` points the recipe's data (and the maze's model) at the stand-ins built in ``workdir``; ``model_path``
    replaces a Hub model (None: the recipe's path, resolved through ``env``). ``scaled_also``: keys scaled beyond
    the above (a kept key among them is overridden), before the TransferQueue bound is computed, so the bound is
    the scaled run's."""
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.environment import environment_with
    from fgrpo_verl.preflight.rules import storage_load
    from fgrpo_verl.launch.recipe import load_recipe

    recipe = load_recipe(recipe_name)
    (run,) = recipe.select([run_name])
    base = recipe.run_overrides(run)
    with environment_with(env):
        cluster = compose(base)
        world = int(cluster.trainer.nnodes) * int(cluster.trainer.n_gpus_per_node)
        gpus = min(world, MAX_GPUS)
        kept_keys = [
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
            "actor_rollout_ref.rollout.data_parallel_size",
            "actor_rollout_ref.rollout.pipeline_model_parallel_size",
            "actor_rollout_ref.rollout.n",
            "transfer_queue.backend.SimpleStorage.num_data_storage_units",
            "data.max_prompt_length",
        ]
        kept = {key: _get(cluster, key) for key in kept_keys}
        scaled_values: dict[str, object] = {
            "trainer.nnodes": 1,
            "trainer.n_gpus_per_node": gpus,
            "ray_kwargs.ray_init.num_gpus": gpus,
            "trainer.total_training_steps": 1,
            "trainer.val_before_train": False,
            "trainer.logger": "[console,file]",
            "trainer.default_local_dir": str(workdir / "checkpoints"),
            **scale(cluster, gpus),
        }
        if _get(cluster, "data.val_batch_size") is not None:
            scaled_values["data.val_batch_size"] = 1
        if int(cluster.actor_rollout_ref.rollout.val_kwargs.n) > VAL_SAMPLES:
            scaled_values["actor_rollout_ref.rollout.val_kwargs.n"] = VAL_SAMPLES
        if model_path is not None:
            scaled_values["actor_rollout_ref.model.path"] = model_path
            scaled_values["data.max_response_length"] = LLM_RESPONSE_TOKENS
        scaled_values.update(scaled_also or {})
        kept = {k: v for k, v in kept.items() if k not in scaled_values}
        overrides = [f"backend={backend}", *base, *(f"{k}={v}" for k, v in kept.items())]
        overrides += [f"{k}={v}" for k, v in scaled_values.items()]
        # the tightest TransferQueue the preflight accepts for the scaled run
        scaled_config = compose(overrides)
        live = storage_load(scaled_config, workdir).live
        total_key = "transfer_queue.backend.SimpleStorage.total_storage_size"
        overrides.append(f"{total_key}={live}")
        scaled_values[total_key] = live
        scaled = {k: (_get(cluster, k), v) for k, v in scaled_values.items()}
    return Rehearsal(recipe_name, run_name, overrides, dict(env), cluster, kept, scaled)


# ---------------------------------------------------------------- stand-in models and data


def standin_maze(out: Path, n_train: int, n_val: int = 1) -> dict[str, str]:
    """17x17 mazes (the recipe's size and lengths) and a stand-in policy at ``out/sft_model`` (the path
    ``base_model=maze_3m`` reads): the maze tokenizer, hidden 64, 2 layers, 2 heads of 32 (vLLM's CPU attention
    needs head sizes >= 32), 512 positions as the paper's model. Returns the job environment (FGRPO_MAZE_DIR)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from fgrpo_verl.tasks.maze import build
    from fgrpo_verl.tasks.maze.model import save_model_dir
    from fgrpo_verl.tasks.maze.tokenizer import VOCAB_SIZE, build_tokenizer

    import torch

    build(out, size=17, n_train=n_train, n_val=n_val, model_preset="tiny", seed=0)
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=128, max_position_embeddings=512, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
    )
    save_model_dir(Qwen2ForCausalLM(config), tokenizer, out / "sft_model")
    return {"FGRPO_MAZE_DIR": str(out)}


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def standin_llm(out: Path, problems: list[tuple[str, str]], val_rows: int = 2) -> tuple[str, dict[str, str]]:
    """A stand-in chat model (byte-level Qwen2 tokenizer, ChatML template, 2 layers, hidden 64, 2 heads of 32)
    and DeepScaleR-format data prepared from ``problems`` by ``prepare-deepscaler``'s own code into
    ``out/data/deepscaler``; ``val_rows`` of them, as data source AIME25, are the ``validation=aime25`` file
    (``out/benchmarks/AIME25.parquet``: the benchmark in verl's format with the training prompt). Returns (model
    dir, the job environment: FGRPO_DATA_DIR, FGRPO_BENCH_DIR)."""
    import torch
    from tokenizers import pre_tokenizers
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    from fgrpo_verl.data.deepscaler import prepare_files

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    vocab = {tok: i for i, tok in enumerate([*specials, *sorted(alphabet)])}
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], unk_token="<|endoftext|>", eos_token="<|im_end|>",
                               pad_token="<|endoftext|>", additional_special_tokens=specials[1:])
    tokenizer.chat_template = CHATML
    model_dir = out / "model"
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=128, max_position_embeddings=2048, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    source = out / "deepscaler.jsonl"
    source.write_text("".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in problems))
    prepare_files([str(source)], str(model_dir), str(out / "data" / "deepscaler"))
    import pandas as pd

    val = pd.read_parquet(out / "data" / "deepscaler" / "val.parquet").head(val_rows)
    val["data_source"] = "AIME25"
    (out / "benchmarks").mkdir(parents=True, exist_ok=True)
    val.to_parquet(out / "benchmarks" / "AIME25.parquet")
    return str(model_dir), {"FGRPO_DATA_DIR": str(out / "data"), "FGRPO_BENCH_DIR": str(out / "benchmarks")}


