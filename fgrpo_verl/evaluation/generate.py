"""Sampling n completions per problem: vLLM on GPU, plain ``transformers`` for tiny models on CPU.

vLLM is imported only inside ``VLLMSampler`` (never on the CPU path). Both back-ends take the same prompts (built
once by ``build_prompt`` with the model's tokenizer) and return ``list[list[str]]``: n completion texts per prompt,
special tokens stripped. Sampling follows the paper's evaluation: temperature 1.0, top-p 1.0, no top-k.
"""

from __future__ import annotations

import json
from pathlib import Path

# The paper's math/GPQA evaluation prompt (Table 9), used as the system prompt by default.
PAPER_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
BACKENDS = ("vllm", "transformers")
PROMPT_STYLES = ("chat", "raw")


def resolve_model_path(path: str | Path) -> Path:
    """An HF model directory, or a verl checkpoint whose ``actor/huggingface`` holds merged weights.

    verl saves FSDP shards under ``global_step_N/actor`` and only config/tokenizer under ``actor/huggingface``
    unless ``checkpoint.save_contents`` includes ``hf_model``; sharded checkpoints must be merged first.
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"model path {str(path)!r} is not a directory")

    def has_weights(d: Path) -> bool:
        patterns = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")
        return (d / "config.json").is_file() and any(next(d.glob(p), None) is not None for p in patterns)

    for candidate in (path, path / "huggingface", path / "actor" / "huggingface"):
        if has_weights(candidate):
            return candidate
    actor = path if path.name == "actor" else path / "actor"
    if actor.is_dir():
        raise ValueError(
            f"{str(path)!r} is a verl checkpoint without merged HF weights; merge it first:\n"
            f"  python -m verl.model_merger merge --backend fsdp --local_dir {actor} --target_dir {path}/merged_hf\n"
            f"then pass --model NAME={path}/merged_hf"
        )
    raise ValueError(f"{str(path)!r} holds no HF model (config.json + *.safetensors / pytorch_model*.bin)")


def build_prompt(record: dict, tokenizer, system_prompt: str | None, style: str,
                 template_kwargs: dict | None = None) -> str:
    """The exact text fed to the model for one benchmark record.

    ``record["prompt"]`` wins: a string is used verbatim, a message list is rendered with the chat template.
    Otherwise ``style="chat"`` renders [system_prompt (if any), user: problem] with the chat template and
    ``style="raw"`` uses ``system_prompt + "\\n\\n" + problem`` (or the problem alone) without any template.
    ``template_kwargs`` go to the chat template (e.g. ``{"enable_thinking": true}`` for Qwen3, paper Table 9).
    """
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {PROMPT_STYLES}, got {style!r}")
    prompt = record.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if prompt is None:
        if style == "raw":
            return f"{system_prompt}\n\n{record['problem']}" if system_prompt else record["problem"]
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
            {"role": "user", "content": record["problem"]}
        ]
    else:
        messages = prompt
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"problem {record.get('id')!r} needs a chat template but the tokenizer has none; "
            "use --prompt-style raw (or give a string 'prompt')"
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **(template_kwargs or {}))


class TransformersSampler:
    """Plain HF ``generate`` sampling; meant for tiny models on CPU (tests, the maze demo)."""

    def __init__(self, model_path, device: str = "cpu", dtype: str = "float32", batch_size: int = 64):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=getattr(torch, dtype)).to(device).eval()
        self.device = device
        self.batch_size = batch_size

    def sample(self, prompts: list[str], n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int):
        torch = self.torch
        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        outputs = []
        for index, prompt in enumerate(prompts):
            # Seed per prompt so a prompt's samples do not depend on which other prompts are in the run.
            torch.manual_seed(seed + index)
            ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids.to(self.device)
            texts: list[str] = []
            while len(texts) < n:
                batch = min(self.batch_size, n - len(texts))
                with torch.no_grad():
                    out = self.model.generate(
                        ids.expand(batch, -1), attention_mask=torch.ones(batch, ids.shape[1], dtype=torch.long, device=self.device),
                        do_sample=True, temperature=temperature, top_p=top_p, top_k=0, max_new_tokens=max_new_tokens,
                        pad_token_id=pad_id,
                    )
                texts.extend(tok.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True))
            outputs.append(texts)
        return outputs


class VLLMSampler:
    """vLLM offline sampling (GPU). Imported lazily so the CPU path never touches vLLM."""

    def __init__(self, model_path, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, seed: int = 0, extra_engine_args: str | None = None):
        from transformers import AutoTokenizer
        from vllm import LLM  # noqa: import here: GPU only

        kwargs = dict(model=str(model_path), tensor_parallel_size=tensor_parallel_size,
                      gpu_memory_utilization=gpu_memory_utilization, seed=seed)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if extra_engine_args:
            extra = json.loads(extra_engine_args)
            if not isinstance(extra, dict):
                raise ValueError(f"--vllm-engine-args must be a JSON object, got {extra_engine_args!r}")
            kwargs.update(extra)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.llm = LLM(**kwargs)

    def sample(self, prompts: list[str], n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int):
        from vllm import SamplingParams

        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=seed,
                                skip_special_tokens=True)
        results = self.llm.generate(prompts, params)
        return [[choice.text for choice in result.outputs] for result in results]


def make_sampler(backend: str, model_path, args):
    """Build the sampler for ``--backend`` from the CLI arguments."""
    if backend == "transformers":
        return TransformersSampler(model_path, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    if backend == "vllm":
        return VLLMSampler(model_path, tensor_parallel_size=args.tensor_parallel_size,
                           gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=args.max_model_len,
                           seed=args.seed, extra_engine_args=args.vllm_engine_args)
    raise ValueError(f"--backend must be one of {BACKENDS}, got {backend!r}")
