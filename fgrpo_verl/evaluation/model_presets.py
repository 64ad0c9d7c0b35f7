"""What a run's base model implies for evaluating its checkpoints: the paper's Table 9 prompt preset, the response
length (§5.3: "Max length 8192 / 4096 (Qwen3) / 8192 (Llama)", the same as training) and the published size.

    base model (actor_rollout_ref.model.path)   preset                  max new tokens   parameters   table name
    Qwen/Qwen2.5-7B                             qwen2.5-7b              8192             7.62e9       Qwen2.5-7B
    Qwen/Qwen3-4B-Base                          qwen3-4b-base           4096             4.02e9       Qwen3-4B-Base
    meta-llama/Llama-3.2-3B-Instruct            llama-3.2-3b-instruct   8192             3.21e9       Llama-3.2-3B-Instruct

A model is recognised by its exact HF id, or by a local directory whose last path component is the id's last
component (``/models/Qwen2.5-7B``; case-insensitive), the usual copy of a hub model. Anything else is an error that
names these choices and the recipe keys that state the setting explicitly (``evaluation.prompt_preset``,
``evaluation.max_new_tokens``): evaluating a checkpoint with another model's prompts or length would silently
change every number in the table. ``max_new_tokens: train`` means the run's own ``data.max_response_length`` (the
maze and the CPU test recipes use it).
"""

from __future__ import annotations

from dataclasses import dataclass

from fgrpo_verl.evaluation.prompts import PRESETS


@dataclass(frozen=True)
class ModelEval:
    hf_id: str
    preset: str           # fgrpo_verl.evaluation.prompts.PRESETS key (paper Table 9)
    max_new_tokens: int   # paper §5.3 evaluation length (= training length)
    params: float         # published parameter count
    table_name: str       # the model's name in the paper's tables


MODELS = {
    m.hf_id: m
    for m in (
        ModelEval("Qwen/Qwen2.5-7B", "qwen2.5-7b", 8192, 7.62e9, "Qwen2.5-7B"),
        ModelEval("Qwen/Qwen3-4B-Base", "qwen3-4b-base", 4096, 4.02e9, "Qwen3-4B-Base"),
        ModelEval("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b-instruct", 8192, 3.21e9, "Llama-3.2-3B-Instruct"),
    )
}


def known_model(path: str) -> ModelEval | None:
    """The paper model ``path`` names (HF id, or a directory named like the id's last component); None otherwise."""
    text = str(path).rstrip("/")
    last = text.rsplit("/", 1)[-1].lower()
    return MODELS.get(text) or next((m for m in MODELS.values() if m.hf_id.rsplit("/", 1)[-1].lower() == last), None)


@dataclass(frozen=True)
class EvalSetting:
    preset: str
    max_new_tokens: int
    source: str  # where the two values come from, for --dry-run and the job log


def eval_setting(model_path: str, train_max_response_length: int, preset: str | None = None,
                 max_new_tokens: int | str | None = None) -> EvalSetting:
    """The preset and response length for evaluating checkpoints of a run whose base model is ``model_path``.

    Explicit values (a recipe's ``evaluation.prompt_preset`` / ``evaluation.max_new_tokens``) win; otherwise both
    come from :data:`MODELS`; a model not in it without both explicit values is a ValueError naming the choices."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"evaluation.prompt_preset={preset!r} is unknown; valid: {', '.join(PRESETS)}")
    if max_new_tokens == "train":
        max_new_tokens = int(train_max_response_length)
    elif max_new_tokens is not None and max_new_tokens < 1:  # an int: the recipe's shape (EvalSpec) typed it
        raise ValueError(f"evaluation.max_new_tokens={max_new_tokens!r}: expected a positive integer or 'train' "
                         "(the run's data.max_response_length)")
    model = known_model(model_path)
    if model is None and (preset is None or max_new_tokens is None):
        choices = "; ".join(f"{m.hf_id} -> preset {m.preset}, {m.max_new_tokens} tokens" for m in MODELS.values())
        raise ValueError(
            f"base model {model_path!r} is not one of the paper's, so its Table 9 prompt preset and evaluation length "
            f"are unknown (known: {choices}). Name the model by its HF id or a directory with the same last component, "
            f"or set evaluation.prompt_preset (one of {', '.join(PRESETS)}) and evaluation.max_new_tokens (tokens, or "
            "'train' for data.max_response_length) in the recipe"
        )
    if model is None:
        return EvalSetting(preset, int(max_new_tokens), "recipe evaluation.prompt_preset / max_new_tokens")
    source = f"base model {model.hf_id} (paper Table 9, §5.3)"
    if preset is not None or max_new_tokens is not None:
        source += "; recipe evaluation." + " / ".join(
            k for k, v in (("prompt_preset", preset), ("max_new_tokens", max_new_tokens)) if v is not None)
    return EvalSetting(preset or model.preset, int(max_new_tokens or model.max_new_tokens), source)
