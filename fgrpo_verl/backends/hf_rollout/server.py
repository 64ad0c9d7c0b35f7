"""The rollout server: one Ray actor per replica that samples from a transformers model.

It implements the token-in/token-out contract verl's ``LLMServerClient`` expects of a rollout server
(``verl/workers/rollout/vllm_rollout/vllm_async_server.py`` is the reference implementation):
``generate(prompt_ids, sampling_params, request_id) -> TokenOutput`` whose ``extra_fields`` carry
``global_steps`` (the v1 trainer's staleness metrics read it), plus the control calls the trainer makes around
weight syncs (``wake_up``, ``sleep``, ``clear_kv_cache``, ``abort_all_requests``, ...), which are no-ops here
because nothing is cached between requests and the model stays resident.

Concurrent ``generate`` calls (verl's agent loop sends one per sample, ``rollout.n`` per prompt) are
collected into batches: a background task takes every pending request, runs :func:`sample_batch` in a worker
thread, and resolves each request's future. The device follows verl's platform: CUDA on ``nvidia``, the host
on ``cpu``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Optional

import torch
from transformers import AutoModelForCausalLM
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.torch_dtypes import PrecisionType
from verl.workers.config import HFModelConfig
from verl.workers.rollout.replica import TokenOutput

from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams, sample_batch

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "INFO"))

# batching window (see HFRolloutServer._gather): quiet time that closes a batch, and the longest wait
GATHER_QUIET_S = 0.02
GATHER_MAX_S = 1.0


@dataclass
class _Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future


def _token_id_set(*values) -> frozenset[int]:
    """The ids of ``values``, each an id, a collection of ids or None."""
    many = [value if isinstance(value, (list, tuple, set, frozenset)) else [value] for value in values]
    return frozenset(int(v) for ids in many for v in ids if v is not None)


class HFRolloutServer:
    """Serves ``generate`` for one rollout replica (wrapped with ``ray.remote`` by :class:`HFReplica`)."""

    def __init__(self, config, model_config, replica_rank: int, device: str):
        # The replica passes the raw `actor_rollout_ref.model` DictConfig; HFModelConfig loads tokenizer + hf_config.
        config = omega_conf_to_dataclass(config)
        model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.config = config
        self.model_config = model_config
        self.replica_rank = replica_rank
        self.device = torch.device(device)
        self.global_steps = 0
        dtype = PrecisionType.to_dtype(config.dtype)
        # The actor's hf_config asks for flash_attention_2 unless overridden; honour an explicit override only.
        attn = (model_config.override_config or {}).get("attn_implementation", "sdpa")
        self.model = AutoModelForCausalLM.from_pretrained(
            model_config.local_path, config=model_config.hf_config, dtype=dtype, attn_implementation=attn
        ).to(self.device)
        self.model.eval()
        tokenizer = model_config.tokenizer
        gen = model_config.generation_config
        self.eos_token_ids = _token_id_set(
            getattr(gen, "eos_token_id", None),
            getattr(model_config.hf_config, "eos_token_id", None),
            getattr(tokenizer, "eos_token_id", None),
        )
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = int(pad if pad is not None else min(self.eos_token_ids, default=0))
        self.generator = torch.Generator(device=self.device).manual_seed(int(config.seed) + replica_rank)
        self.max_batch = int(config.max_num_seqs)
        self._pending: list[_Request] = []
        self._wakeup: Optional[asyncio.Event] = None
        self._worker: Optional[asyncio.Task] = None
        self._model_lock = asyncio.Lock()  # bound to an event loop only while it is waited for
        logger.info(
            "hf rollout server %d: %s on %s, dtype %s, attention %s", replica_rank,
            type(self.model).__name__, self.device, dtype, attn,
        )

    def get_server_address(self) -> str:
        """A unique id for verl's load balancer, which keys servers by address (no HTTP is served)."""
        return f"hf-rollout-{self.replica_rank}"

    def _default_max_tokens(self, prompt_len: int) -> int:
        cfg = self.config
        budget = min(cfg.response_length, cfg.prompt_length + cfg.response_length - prompt_len)
        if cfg.max_model_len:
            budget = min(budget, int(cfg.max_model_len) - prompt_len)
        if budget < 1:
            raise ValueError(
                f"prompt of {prompt_len} tokens leaves no room to generate (prompt_length={cfg.prompt_length}, "
                f"response_length={cfg.response_length}, max_model_len={cfg.max_model_len})"
            )
        return budget

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        audio_data: Optional[list[Any]] = None,
        mm_processor_kwargs: Optional[dict[str, Any]] = None,
        priority: int = 0,
    ):
        if image_data is not None or video_data is not None or audio_data is not None:
            raise ValueError("the hf rollout serves text-only models: image/video/audio data is not supported")
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        want_log_probs = bool(params.pop("logprobs", False))
        parsed = SamplingParams.from_request(params, self._default_max_tokens(len(prompt_ids)), self.eos_token_ids)
        if self._worker is None or self._worker.done():  # in the event loop of the first request
            self._wakeup = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._serve_batches())
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(request_id, prompt_ids, parsed, future))
        self._wakeup.set()
        result = await future
        if result is None:  # aborted before it was scheduled
            return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted",
                               extra_fields={"global_steps": self.global_steps})
        return TokenOutput(
            token_ids=result.token_ids,
            log_probs=result.log_probs if want_log_probs else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    async def _gather(self) -> None:
        """Wait while requests keep arriving, so that one step's requests are sampled as one batch.

        verl's agent loop sends one request per sample, spread over tens of milliseconds (more on a loaded
        machine). Sampling cost grows far slower than the batch, so starting early with part of them and
        sampling the rest in a second pass costs a whole extra pass. Wait until no request has arrived for
        :data:`GATHER_QUIET_S`, the batch is full, or :data:`GATHER_MAX_S` passed.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + GATHER_MAX_S
        seen = -1
        while seen != len(self._pending) and len(self._pending) < self.max_batch and loop.time() < deadline:
            seen = len(self._pending)
            await asyncio.sleep(GATHER_QUIET_S)

    async def _serve_batches(self) -> None:
        while True:
            await self._wakeup.wait()
            await self._gather()
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            if not self._pending:
                self._wakeup.clear()
            if not batch:
                continue
            try:
                async with self._model_lock:
                    started = time.perf_counter()
                    results = await asyncio.to_thread(
                        sample_batch, self.model, [r.prompt_ids for r in batch], [r.params for r in batch],
                        self.pad_token_id, self.generator,
                    )
            except Exception as exc:  # fail the requests, keep serving
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            logger.debug("hf rollout: sampled %d requests in %.3f s (%d pending)", len(batch),
                         time.perf_counter() - started, len(self._pending))
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)

    async def update_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: Optional[int] = None):
        """Load the actor's full (HF-named) weights into the resident model, in place."""
        async with self._model_lock:
            state = self.model.state_dict()  # every name, tied aliases (lm_head -> embed_tokens) included
            unknown = sorted(set(named_tensors) - set(state))
            if unknown:
                raise ValueError(f"weights not in the rollout model: {unknown[:5]} (of {len(unknown)})")
            missing = sorted(set(dict(self.model.named_parameters())) - set(named_tensors))
            if missing:
                raise ValueError(f"actor sent no weights for rollout parameters {missing[:5]} (of {len(missing)})")
            with torch.no_grad():
                for name, tensor in named_tensors.items():
                    state[name].copy_(tensor.to(device=self.device, dtype=state[name].dtype))
        if global_steps is not None:
            self.global_steps = global_steps

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps

    async def _nothing(self, *args, **kwargs):
        return None

    # nothing is cached between requests and the model stays resident: nothing to free, resume or profile
    wake_up = sleep = clear_kv_cache = release_kv_cache = resume_kv_cache = resume_generation = _nothing
    start_profile = stop_profile = _nothing

    async def wait_for_requests_to_drain(self):
        while self._pending or self._model_lock.locked():
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Abort the requests not yet scheduled (a running batch finishes; it is short)."""
        aborted, self._pending = self._pending, []
        for request in aborted:
            if not request.future.done():
                request.future.set_result(None)
        return {"aborted_count": len(aborted), "request_ids": [r.request_id for r in aborted]}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        for request in list(self._pending):
            if request.request_id == request_id:
                self._pending.remove(request)
                request.future.set_result(None)
                return {"aborted": True, "request_id": request_id}
        return {"aborted": False, "request_id": request_id}
