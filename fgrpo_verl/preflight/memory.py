"""The per-GPU memory estimate: arithmetic on the composed config and the model's architecture (no verl import), a
lower bound of each phase of a step whose micro-batches are full (docs/slurm.md states the formula). It warns;
``FGRPO_PREFLIGHT_MEMORY=refuse`` makes it refuse. The actor's FSDP states on the GPU follow verl 0.9.1's phases:

- start: v1 ``PPOTrainer._setup`` starts vLLM after the actor's ``init_model``; torch's AdamW allocates its moments at
  the first ``step()``: the parameters alone (none with ``param_offload``, ``FSDPEngine.initialize``).
- rollout, from the second step: ``EngineTrainModeCtx.__exit__`` frees the gradients (``zero_grad``, set_to_none);
  ``param_offload`` / ``optimizer_offload`` move parameters / moments to the host before the KV cache wakes.
- log-prob: eval mode (``BaseEngineCtx._context_switch``) loads offloaded parameters, not the optimizer, and runs
  under ``no_grad``. The reference worker (``forward_only``: ``CPUOffload``) streams its weights from the host.
- update: train mode loads parameters, gradients and moments back, offloaded or not. FSDP2's ``offload_policy`` keeps
  every state on the host in every phase. Bytes follow ``fsdp_config.model_dtype`` (fp32 by default); with LoRA the
  frozen base weights have no gradients or moments.
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass

GIB = 2**30
# a CUDA context per process (the training worker's, and vLLM's, which stays while vLLM sleeps): an assumption for
# torch on CUDA 12, not measured here
CONTEXT = 0.5 * GIB
DTYPE_BYTES = {"fp32": 4, "float32": 4, "32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "16": 2}
BF16 = 2
VLLM_NAMES = ("vllm", "sglang")
# verl's FusedLinearForPPO (verl/utils/experimental/torch_functional.py) works in 512-token chunks (dense_common.py
# forward_with_torch_backend): bytes per chunk x V element at its peak, measured on verl's class
# (tests/test_preflight_memory_on_cpu.py): the update's backward, with the entropy's gradient, the log-prob forward
FUSED_CHUNK = 512
FUSED_TORCH_TRAIN, FUSED_TORCH_TRAIN_ENTROPY, FUSED_TORCH_INFER = 20, 28, 12
# verl's Triton kernel (verl/utils/kernel/kernels.py): efficient_entropy_backward's d_logits has 9,504 columns
# whatever V; efficient_entropy_forward keeps three fp32 (tokens, ceil(V / 1024)) arrays
TRITON_DLOGITS_COLUMNS, TRITON_VOCAB_SPLIT = 9504, 1024


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f}"


def sp(block) -> int:
    """The Ulysses sequence-parallel size of an actor or reference block, as verl's ``FSDPActorConfig.__post_init__``
    reads it: the block's own ``ulysses_sequence_parallel_size`` when > 1, else ``fsdp_config``'s."""
    own = int(block.get("ulysses_sequence_parallel_size", 1) or 1)
    return own if own > 1 else max(1, int((block.get("fsdp_config") or {}).get("ulysses_sequence_parallel_size") or 1))


def batch_layout(config, world: int) -> tuple[int, int, int]:
    """(dp, the training batch after v1's upsampling, samples of one mini-batch): dp = GPUs / the actor's SP
    (``FSDPEngine.get_data_parallel_size``); v1 pads the batch to a multiple of lcm(dp, mini x n)
    (``trainer_base.py`` ``_get_required_batch_multiple``)."""
    n = int(config.actor_rollout_ref.rollout.n)
    dp = max(1, world // sp(config.actor_rollout_ref.actor))
    mini = int(config.actor_rollout_ref.actor.ppo_mini_batch_size) * n
    multiple = math.lcm(dp, mini)
    return dp, math.ceil(int(config.data.train_batch_size) * n / multiple) * multiple, mini


def dynamic(config, section: str) -> bool:
    """Whether a pass packs its micro-batches by tokens: the actor's passes follow actor.use_dynamic_bsz (verl asserts
    rollout.log_prob_use_dynamic_bsz equals it), the reference worker's ref.log_prob_use_dynamic_bsz."""
    aro = config.actor_rollout_ref
    return bool(aro.ref.get("log_prob_use_dynamic_bsz", False)) if section == "ref" else bool(aro.actor.use_dynamic_bsz)


def pass_rows(config, world: int, section: str) -> int:
    """Samples one GPU runs through a pass in a step: its share of a mini-batch (the actor's update), of the padded
    batch (log-probs), over the data-parallel size of the worker that runs it."""
    dp, padded, mini = batch_layout(config, world)
    block = config.actor_rollout_ref.ref if section == "ref" else config.actor_rollout_ref.actor
    return mini // dp if section == "actor" else padded // max(1, world // sp(block))


@dataclass(frozen=True)
class Pass:
    """One micro-batch of one of verl's passes over the model, on one GPU."""

    name: str  # "log-prob", "reference", "update"
    key: str  # the setting that sizes its micro-batches
    value: int
    budget: bool  # packed to a token budget (dynamic batch sizes), else a number of samples
    rows: int  # the GPU's samples in the pass
    sp: int

    def tokens(self, value: int, length: int) -> int:
        """The micro-batch's tokens on one GPU: ``value`` samples of full length, or packed up to value x SP tokens
        (at most the GPU's samples: ``rearrange_micro_batches``), of which Ulysses gives each GPU 1/SP."""
        return math.ceil((min(value * self.sp, self.rows * length) if self.budget else value * length) / self.sp)


def passes(config, world: int, ref_worker: bool) -> list[Pass]:
    """The passes verl runs over the model in a step, in order (the reference worker's where it runs); one whose
    micro-batch size or budget is unset is left out (a rule refuses it)."""
    found = []
    for name, section, prefix in (("log-prob", "rollout", "log_prob"), ("reference", "ref", "log_prob"),
                                  ("update", "actor", "ppo")):
        packed = dynamic(config, section)
        key = f"{prefix}_max_token_len_per_gpu" if packed else f"{prefix}_micro_batch_size_per_gpu"
        value = config.actor_rollout_ref[section].get(key)
        if (section != "ref" or ref_worker) and value is not None and int(value) >= 1:
            block = config.actor_rollout_ref.ref if section == "ref" else config.actor_rollout_ref.actor
            found.append(Pass(name, f"actor_rollout_ref.{section}.{key}", int(value), packed,
                              max(1, pass_rows(config, world, section)), sp(block)))
    return found


def head_bytes(head: str, tokens: int, vocab: int, train: bool, entropy: bool = False, eager: bool = False) -> float:
    """Bytes the LM head holds at its peak for ``tokens`` tokens on one GPU. ``head``: "logits" (materialized, bf16,
    with their gradient in the update; the entropy over them adds its gradient, and without torch.compile,
    ``fsdp_config.use_torch_compile=false``, verl's eager ``entropy_from_logits`` holds a softmax and a temporary of
    their size), or the fused kernel's backend (liger: 0, not modelled)."""
    if head == "torch":
        per_element = (FUSED_TORCH_TRAIN_ENTROPY if entropy else FUSED_TORCH_TRAIN) if train else FUSED_TORCH_INFER
        return float(min(FUSED_CHUNK, tokens) * vocab * per_element)
    if head == "triton":
        forward = tokens * 3 * math.ceil(vocab / TRITON_VOCAB_SPLIT) * 4
        return float(max(forward, tokens * TRITON_DLOGITS_COLUMNS * BF16) if train else forward)
    if head == "liger":
        return 0.0
    return float(tokens * vocab * BF16 * ((2 if train else 1) + (2 if entropy and (train or eager) else 0)))


def shards(config, world: int) -> int:
    """The GPUs the actor's FSDP states are sharded over: ``fsdp_size`` where 0 < it < the GPUs (hybrid: replicated
    across the groups), else all (``verl/workers/engine/fsdp/utils.py`` ``create_device_mesh``)."""
    size = int((config.actor_rollout_ref.actor.get("fsdp_config") or {}).get("fsdp_size", -1) or -1)
    return size if 0 < size < world else world


def states(config, params: float, world: int) -> dict[str, float]:
    """The actor's FSDP states on one GPU in each phase (module docstring)."""
    actor = config.actor_rollout_ref.actor
    fsdp = actor.get("fsdp_config") or {}
    if str(actor.get("strategy", "fsdp")) == "fsdp2" and bool(fsdp.get("offload_policy", False)):
        return dict.fromkeys(("start", "rollout", "log-prob", "reference", "update"), 0.0)
    each = DTYPE_BYTES.get(str(fsdp.get("model_dtype") or "fp32"), 4) * params / shards(config, world)
    trained = 0.0 if int(config.actor_rollout_ref.model.get("lora_rank", 0) or 0) > 0 else 1.0  # FSDPEngine._is_lora
    weights = 0.0 if fsdp.get("param_offload", False) else each
    moments = 0.0 if fsdp.get("optimizer_offload", False) else 2 * each * trained
    return {"start": weights, "rollout": weights + moments, "log-prob": each + moments,
            "reference": weights + moments, "update": each * (1 + 3 * trained)}


# A step's estimate: the GPU's bytes; phase -> bytes per GPU, in the step's order; phase -> the actor's FSDP states in
# it; (Pass, its phase's bytes) per pass; vLLM's share, u x M; prompt + response tokens; at(pass, tokens): the pass's
# phase with a micro-batch of that many tokens; the least share vLLM starts with (kv_cache)
Estimate = namedtuple("Estimate", "capacity phases states passes vllm length at least")


def estimate(config, arch, world: int, ref_worker: bool, head: str, capacity: float) -> Estimate:
    """Each phase's bytes per GPU: the actor's states, CUDA contexts, vLLM's share while it is awake (through the
    passes too with ``free_cache_engine=false``), and in a pass FSDP's gathered bf16 units (the root: the embedding
    and, untied, the LM head, which eval mode keeps gathered until the pass ends, ``EngineEvalModeCtx.__exit__``; two
    decoder layers: the running one and the prefetched one; the update adds their gradients) and one micro-batch's
    activations: under ``no_grad`` the larger of one layer's MLP and the LM head; in the update one bf16 hidden state
    per layer (gradient checkpointing, ``model.enable_gradient_checkpointing``) and the larger of the LM head's
    backward and the layer whose backward recomputes its saved tensors, beside two MLP-wide gradients."""
    aro = config.actor_rollout_ref
    actor, rollout = aro.actor, aro.rollout
    vllm = float(rollout.gpu_memory_utilization) * capacity if str(rollout.name) in VLLM_NAMES else 0.0
    other = vllm if not bool(rollout.get("free_cache_engine", True)) else CONTEXT  # vLLM beside a pass
    h, v, layers, mlp = arch.hidden_size, arch.vocab_size, arch.num_hidden_layers, arch.intermediate_size
    root = (1 if arch.tie_word_embeddings else 2) * v * h * BF16
    layer = max(0.0, arch.params - root / BF16) / layers * BF16
    # one decoder layer's saved tensors per token (bf16): two RMSNorms' fp32 upcasts and outputs, q, k, v, their
    # rotary copies and the attention's output, the MLP's gate, activation, up and product
    layer_act = BF16 * (10 * h + 4 * arch.num_attention_heads * arch.head_dim + 5 * arch.num_key_value_heads
                        * arch.head_dim + 4 * mlp)
    entropy = bool(actor.get("calculate_entropy", False)) or float(actor.get("entropy_coeff", 0) or 0) != 0.0
    eager = not bool((actor.get("fsdp_config") or {}).get("use_torch_compile", True))
    checkpointing = bool(aro.model.get("enable_gradient_checkpointing", True))
    resident = states(config, arch.params, world)

    def at(p: Pass, tokens: int) -> float:
        if p.name == "update":
            act = tokens * (BF16 * h if checkpointing else layer_act) * layers + 2 * root + 3 * layer + max(
                head_bytes(head, tokens, v, True, entropy), tokens * (layer_act + 2 * BF16 * mlp) if checkpointing
                else 0.0)
        else:  # the actor's log-prob pass computes the entropy (v1 _compute_old_log_prob), the reference's not
            act = root + 2 * layer + max(tokens * BF16 * (3 * mlp + 2 * h), tokens * BF16 * h
                                         + head_bytes(head, tokens, v, False, p.name == "log-prob", eager))
        return resident[p.name] + act + CONTEXT + other

    length = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    found = [(p, at(p, p.tokens(p.value, length))) for p in passes(config, world, ref_worker)]
    phases = {"start": resident["start"] + CONTEXT + vllm, "rollout": resident["rollout"] + CONTEXT + vllm,
              **{p.name: total for p, total in found}}
    return Estimate(capacity, phases, resident, found, vllm, length, at, kv_cache(config, arch, capacity)[4])


def kv_cache(config, arch, capacity: float) -> tuple[float, float, float, int, float]:
    """(vLLM's bf16 weights on a GPU, at most the KV cache's bytes: its share less them, its bytes per token: 2 (K, V) x
    layers x ceil(KV heads / TP) x head size x 2 B, max_model_len (unset: max_position_embeddings), the least share
    (hundredths) whose KV cache holds one: vLLM refuses to start below it)."""
    rollout = config.actor_rollout_ref.rollout
    tp = int(rollout.tensor_model_parallel_size)
    weights = BF16 * arch.params / tp
    per_token = 2 * arch.num_hidden_layers * math.ceil(arch.num_key_value_heads / tp) * arch.head_dim * BF16
    mml = int(rollout.get("max_model_len") or arch.max_position_embeddings)
    return (weights, float(rollout.gpu_memory_utilization) * capacity - weights, float(per_token), mml,
            math.ceil((weights + per_token * mml) / capacity * 100) / 100)


def share_fix(capacity: float, beside: float, least: float, offload: str) -> str:
    """The largest share (hundredths) that fits beside ``beside`` bytes where >= ``least``, else offload, more GPUs."""
    fits = math.floor((capacity - beside) / capacity * 100) / 100
    return f"lower it to {fits:.2f}, or set {offload}" if fits >= least else f"set {offload}, or use more GPUs"


def _smaller(est: Estimate, p: Pass) -> tuple[int, float] | None:
    """The largest micro-batch below the pass's own whose phase fits, and that phase: a divisor of the GPU's samples
    (verl's prepare_micro_batches asserts it), or a token budget (the phase grows with it: bisection)."""
    def at(value: int) -> float:
        return est.at(p, p.tokens(value, est.length))

    if not p.budget:
        return next(((d, at(d)) for d in range(p.value - 1, 0, -1) if p.rows % d == 0 and at(d) <= est.capacity),
                    None)
    low, high = 0, p.value - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if at(mid) <= est.capacity else (low, mid - 1)
    return (low, at(low)) if low else None


def warnings(est: Estimate, config, skip: set) -> list[str]:
    """A line ``key=value: problem; fix`` for each phase over the GPU (but those in ``skip``: a certain rule refused
    them): the setting whose change would fit it, with the value that does where one exists."""
    rollout, fsdp, length = config.actor_rollout_ref.rollout, "actor_rollout_ref.actor.fsdp_config", est.length
    over, found = f"> {gib(est.capacity)} GiB (slurm.gpu_memory_gib)", []
    for phase, offload in (("start", "param_offload=true"), ("rollout", "optimizer_offload=true (and param_offload)")):
        total = est.phases[phase]
        if phase not in skip and est.vllm and total > est.capacity:
            found.append(f"actor_rollout_ref.rollout.gpu_memory_utilization={rollout.gpu_memory_utilization}: the "
                         f"{phase} phase needs {gib(total)} GiB per GPU ({gib(est.states[phase])} GiB of FSDP states, "
                         f"vLLM's {gib(est.vllm)} GiB, CUDA contexts) {over}; "
                         + share_fix(est.capacity, total - est.vllm, est.least, f"{fsdp}.{offload}"))
    for p, total in est.passes:
        if p.name in skip or total <= est.capacity:
            continue
        smaller = _smaller(est, p)
        moments_here = not (config.actor_rollout_ref.actor.get("fsdp_config") or {}).get("optimizer_offload", False)
        fix = (f"lower it to {smaller[0]} ({gib(smaller[1])} GiB)" if smaller else "use more GPUs, or FSDP2's CPU "
               f"offload (backend=gpu_fsdp2 with {fsdp}.offload_policy=true)" if p.name == "update" else
               f"set {fsdp}.optimizer_offload=true" if moments_here else "use more GPUs")
        if not bool(config.actor_rollout_ref.model.get("use_fused_kernels", False)):
            fix += ", or set actor_rollout_ref.model.use_fused_kernels=true"
        packed = "packed to its token budget" if p.budget else "of full-length sequences"
        found.append(f"{p.key}={p.value}: the {p.name} phase needs {gib(total)} GiB per GPU ({gib(est.states[p.name])} "
                     f"GiB of FSDP states, one micro-batch {packed}: {p.tokens(p.value, length)} tokens per GPU) "
                     f"{over}; {fix}")
    return found
