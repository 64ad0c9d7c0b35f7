"""Tiny Qwen2-architecture policies for the maze task, randomly initialised and built locally.

``paper``: the configuration the paper digest (§5.2) gives for MaxRL's maze checkpoint: hidden 256, 4 layers,
4 heads, 2 KV heads, FFN 1024, vocab 32, max positions 512. With tied embeddings that is
3,944,704 parameters (the paper says "~3M"). ``small``: the CPU demo policy; ``tiny``: tests.
"""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.tasks.maze.tokenizer import VOCAB_SIZE

PRESETS: dict[str, dict] = {
    "paper": dict(
        hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=1024, max_position_embeddings=512,
    ),
    # the demo's policy (989,312 params): on 7x7 mazes 300 SFT steps give a low but non-zero pass rate
    "small": dict(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=512, max_position_embeddings=256,
    ),
    # tests and smoke runs (125,504 params)
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=256, max_position_embeddings=256,
    ),
}


def build_model(preset: str, tokenizer, seed: int):
    """A randomly initialised ``Qwen2ForCausalLM`` of ``preset`` with the tokenizer's special ids (init drawn from
    ``torch.manual_seed(seed)``)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if preset not in PRESETS:
        raise ValueError(f"model preset must be one of {sorted(PRESETS)}, got {preset!r}")
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        attention_dropout=0.0,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
        **PRESETS[preset],
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def save_model_dir(model, tokenizer, out_dir: str | Path) -> Path:
    """Save model, generation config and tokenizer into one complete HF model directory."""
    from transformers import GenerationConfig

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return out_dir
