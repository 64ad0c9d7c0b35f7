"""What the launcher knows about a run's model before any job starts: where its files are, and the architecture
numbers the preflight's memory estimate needs (fgrpo_verl/launch/preflight.py).

A model is ``actor_rollout_ref.model.path``: a local directory, or a Hugging Face Hub id. Jobs run with
``HF_HUB_OFFLINE=1`` (slurm/ray_cluster.sh), so a Hub id must already be in the Hugging Face cache that the
compute nodes read (``HF_HOME`` / ``HF_HUB_CACHE`` on a shared file system): otherwise every rank of every start
and requeue would try to download it, and offline compute nodes fail. :func:`missing_model` is the launch-time
check; docs/slurm.md §2 has the download step.

Architecture numbers come, in order, from the model's ``config.json`` (the local directory, or the snapshot in
the Hugging Face cache) and, for the paper's three models when they are not downloaded here, from
:data:`PUBLISHED` (their published ``config.json`` values; no download at launch). Anything else is unknown and
the checks that need it say so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.evaluation.model_presets import MODELS


@dataclass(frozen=True)
class Architecture:
    """The numbers of a decoder-only transformer the memory estimate uses (names as in HF ``config.json``)."""

    params: float
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int


# The published config.json values of the paper's models (F-GRPO §5.3): vocab, hidden, layers, heads, KV heads,
# head size, positions; their parameter counts are the evaluation presets' (fgrpo_verl/evaluation/model_presets.py).
_PUBLISHED_SHAPES = {
    "Qwen/Qwen2.5-7B": (152064, 3584, 28, 28, 4, 128, 131072),
    "Qwen/Qwen3-4B-Base": (151936, 2560, 36, 32, 8, 128, 32768),
    "meta-llama/Llama-3.2-3B-Instruct": (128256, 3072, 28, 24, 8, 128, 131072),
}
PUBLISHED = {hf_id: Architecture(MODELS[hf_id].params, *shape) for hf_id, shape in _PUBLISHED_SHAPES.items()}
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")


def _weight_files(directory: Path) -> list[Path]:
    """The weight files a load reads: the shards an index lists when there is one (a repository may also ship a
    consolidated copy), else the safetensors ones when a repository ships both formats (transformers and vLLM
    load those and ignore the .bin copies, which must not be counted twice), else the .bin ones."""
    for pattern in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = directory / pattern
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values()))
            return [directory / shard for shard in shards if (directory / shard).is_file()]
    for pattern in _WEIGHTS:
        files = sorted(directory.glob(pattern))
        if files:
            return files
    return []


def _is_hub_id(path: str) -> bool:
    """``org/name``, the form of a Hub id (one slash, no leading ./ or /); :func:`model_dir` tries a local
    directory of that name first, as ``from_pretrained`` does."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~"))


def cached_snapshot(repo_id: str) -> Path | None:
    """The directory of ``repo_id``'s snapshot in the local Hugging Face cache (the one ``config.json`` resolves
    to, offline), None when it is not cached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        return None
    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found).parent if isinstance(found, str) else None


def model_dir(path: str, workdir: Path = Path(".")) -> Path | None:
    """The local directory holding ``path``'s files: the path itself (relative to ``workdir``, where the job
    runs), or its Hub snapshot; None when neither."""
    local = Path(workdir) / os.path.expanduser(path)
    if local.is_dir():
        return local
    return cached_snapshot(path) if _is_hub_id(path) else None


def _incomplete(directory: Path) -> str | None:
    """Why ``directory`` cannot serve the model (no config, no weights, a shard of an index missing); None if whole."""
    if not (directory / "config.json").is_file():
        return "has no config.json"
    index = [*directory.glob("*.index.json")]
    if index:
        shards = set(json.loads(index[0].read_text(encoding="utf-8")).get("weight_map", {}).values())
        absent = sorted(s for s in shards if not (directory / s).is_file())
        if absent:
            return f"lacks {len(absent)} of the {len(shards)} weight shards its {index[0].name} lists ({absent[0]}, ...)"
        return None
    if not _weight_files(directory):
        return "has no weight files (*.safetensors, pytorch_model*.bin)"
    return None


def missing_model(path: str, workdir: Path = Path(".")) -> tuple[str, str] | None:
    """None when a job in ``workdir`` can load ``path`` without the network, else (what is wrong, how to fix it)."""
    directory = model_dir(path, workdir)
    if directory is None:
        if _is_hub_id(path):
            from huggingface_hub.constants import HF_HUB_CACHE

            return (
                f"not in the Hugging Face cache ({HF_HUB_CACHE}), and jobs run with HF_HUB_OFFLINE=1",
                f"download it first where the network is reachable, `hf download {path}`, with "
                "HF_HOME on a file system the compute nodes see (docs/slurm.md §2)",
            )
        return "does not exist here", "build or copy the model there first, or point the key at it"
    why = _incomplete(directory)
    if why is not None:
        return f"{directory} {why}", "download or build it again (docs/slurm.md §2)"
    return None


def _from_config(directory: Path) -> Architecture | None:
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config = config.get("text_config", config)
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        arch = dict(
            vocab_size=int(config["vocab_size"]),
            hidden_size=hidden,
            num_hidden_layers=int(config["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            max_position_embeddings=int(config["max_position_embeddings"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    weights = _weight_files(directory)
    if weights:
        dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
        params = sum(w.stat().st_size for w in weights) / _DTYPE_BYTES.get(str(dtype), 4)
    else:
        params = _count_params(config, arch)
    return Architecture(params=params, **arch)


def _count_params(config: dict, arch: dict) -> float:
    """Parameters of a Llama/Qwen-style decoder from its config (used when only config.json is at hand)."""
    h, v, d = arch["hidden_size"], arch["vocab_size"], arch["head_dim"]
    q, kv = arch["num_attention_heads"] * d, arch["num_key_value_heads"] * d
    ffn = int(config.get("intermediate_size") or 4 * h)
    layer = h * q + 2 * h * kv + q * h + 3 * h * ffn + 2 * h
    embeddings = v * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return float(arch["num_hidden_layers"] * layer + embeddings + h)


def architecture(path: str, workdir: Path = Path(".")) -> Architecture | None:
    """The architecture of the model at ``path`` (see the module docstring for the sources); None if unknown."""
    directory = model_dir(path, workdir)
    if directory is not None and (directory / "config.json").is_file():
        found = _from_config(directory)
        if found is not None:
            return found
    return PUBLISHED.get(path)
