"""What the preflight knows about a run's model before any job starts: where its files are, and the architecture
numbers its memory rules need. A model is ``actor_rollout_ref.model.path``: a local directory, or a Hugging Face Hub
id. Jobs run with ``HF_HUB_OFFLINE=1`` (slurm/ray_cluster.sh), so a Hub id must already be in the Hugging Face cache
the compute nodes read (``HF_HOME`` on a shared file system): otherwise every rank of every start and requeue would
try to download it, and offline compute nodes fail (:func:`missing_model`; docs/slurm.md §2 has the download step).
Architecture numbers come from the model's ``config.json`` (the directory, or the cached snapshot), else, for the
paper's three models, from :data:`PUBLISHED` (no download at launch); anything else is unknown and the rules that
need it say so.
"""

from __future__ import annotations

import json
import os
from collections import namedtuple
from pathlib import Path

from fgrpo_verl.evaluation.model_presets import MODELS

# The numbers of a decoder-only transformer the memory estimate uses: its parameter count, then its shape with the
# names of HF ``config.json``
Architecture = namedtuple("Architecture", "params vocab_size hidden_size num_hidden_layers num_attention_heads "
                          "num_key_value_heads head_dim max_position_embeddings intermediate_size tie_word_embeddings")
# The published config.json values of the paper's models (F-GRPO §5.3): vocab, hidden, layers, heads, KV heads,
# head size, positions, MLP size, tied embeddings; their parameter counts are the evaluation presets'
# (fgrpo_verl/evaluation/model_presets.py).
_PUBLISHED_SHAPES = {
    "Qwen/Qwen2.5-7B": (152064, 3584, 28, 28, 4, 128, 131072, 18944, False),
    "Qwen/Qwen3-4B-Base": (151936, 2560, 36, 32, 8, 128, 32768, 9728, True),
    "meta-llama/Llama-3.2-3B-Instruct": (128256, 3072, 28, 24, 8, 128, 131072, 8192, True),
}
PUBLISHED = {hf_id: Architecture(MODELS[hf_id].params, *shape) for hf_id, shape in _PUBLISHED_SHAPES.items()}
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# each weight format's index and files, in the order transformers and vLLM prefer them: a repository that ships
# both loads the safetensors and ignores the .bin copies (which must not be counted twice)
_FORMATS = (("model.safetensors.index.json", "*.safetensors"), ("pytorch_model.bin.index.json", "pytorch_model*.bin"))


def _weights(directory: Path) -> tuple[list[Path], str | None]:
    """(the weight files a load reads, why they are incomplete or None) of the first format with a file here: the
    shards its index lists when it has one (a repository may also ship a consolidated copy), else its files. A
    download of one format keeps the other's index (a small json) without its shards: that index is not read."""
    for index_name, pattern in _FORMATS:
        index = directory / index_name
        listed = (sorted(set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values()))
                  if index.is_file() else [])
        files = [directory / shard for shard in listed] if listed else sorted(directory.glob(pattern))
        present = [f for f in files if f.is_file()]
        if present:
            absent = [f.name for f in files if not f.is_file()]
            return present, (f"lacks {len(absent)} of the {len(files)} weight shards its {index_name} lists "
                             f"({absent[0]}, ...)" if absent else None)
    return [], "has no weight files (*.safetensors, pytorch_model*.bin)"


def _is_hub_id(path: str) -> bool:
    """``org/name``, the form of a Hub id (one slash, no leading ./ or /); :func:`model_dir` tries a local
    directory of that name first, as ``from_pretrained`` does."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~"))


def model_dir(path: str, workdir: Path = Path(".")) -> Path | None:
    """The local directory holding ``path``'s files: the path itself (relative to ``workdir``, where the job
    runs), or its snapshot in the local Hugging Face cache (the one ``config.json`` resolves to, offline); None when
    neither."""
    from huggingface_hub import try_to_load_from_cache

    local = Path(workdir) / os.path.expanduser(path)
    if local.is_dir():
        return local
    found = try_to_load_from_cache(path, "config.json") if _is_hub_id(path) else None
    return Path(found).parent if isinstance(found, str) else None


def missing_model(path: str, workdir: Path = Path(".")) -> tuple[str, str] | None:
    """None when a job in ``workdir`` can load ``path`` without the network, else (what is wrong, how to fix it)."""
    directory = model_dir(path, workdir)
    if directory is None:
        if _is_hub_id(path):
            from huggingface_hub.constants import HF_HUB_CACHE

            return (f"not in the Hugging Face cache ({HF_HUB_CACHE}), and jobs run with HF_HUB_OFFLINE=1",
                    f"download it first where the network is reachable, `hf download {path}`, with HF_HOME on a file "
                    "system the compute nodes see (docs/slurm.md §2)")
        return "does not exist here", "build or copy the model there first, or point the key at it"
    why = "has no config.json" if not (directory / "config.json").is_file() else _weights(directory)[1]
    if why is not None:
        return f"{directory} {why}", "download or build it again (docs/slurm.md §2)"
    return None


def _from_config(directory: Path) -> Architecture | None:
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    config = config.get("text_config", config)
    try:
        heads, h, v = int(config["num_attention_heads"]), int(config["hidden_size"]), int(config["vocab_size"])
        kv, d = int(config.get("num_key_value_heads") or heads), int(config.get("head_dim") or h // heads)
        layers, mlp = int(config["num_hidden_layers"]), int(config.get("intermediate_size") or 4 * h)
        shape = (v, h, layers, heads, kv, d, int(config["max_position_embeddings"]), mlp,
                 bool(config.get("tie_word_embeddings", False)))
    except (KeyError, TypeError, ValueError):
        return None
    weights = _weights(directory)[0]
    if weights:
        dtype = config.get("torch_dtype") or config.get("dtype") or "float32"
        params = sum(w.stat().st_size for w in weights) / _DTYPE_BYTES.get(str(dtype), 4)
    else:  # only config.json at hand: a Llama/Qwen-style decoder's count
        layer = h * heads * d * 2 + 2 * h * kv * d + 3 * h * mlp + 2 * h
        params = float(layers * layer + v * h * (1 if shape[-1] else 2) + h)
    return Architecture(params, *shape)


def architecture(path: str, workdir: Path = Path(".")) -> Architecture | None:
    """The architecture of the model at ``path`` (see the module docstring for the sources); None if unknown."""
    directory = model_dir(path, workdir)
    found = _from_config(directory) if directory is not None and (directory / "config.json").is_file() else None
    return found or PUBLISHED.get(path)
