"""The preflight's certain rules as data: one function per rule, each naming the verl 0.9.1 (or vLLM, TransferQueue)
code it restates or calls, in :data:`RULES` in the order they run. A rule's docstring says when it refuses;
docs/slurm.md's table is :func:`table` (a test compares them). A test pins each restated rule by running the code it
restates on the same numbers, where that code runs on a CPU (tests/test_preflight_on_cpu.py).
"""

from __future__ import annotations

import math
from collections import namedtuple
from pathlib import Path

from fgrpo_verl.preflight import memory
from fgrpo_verl.preflight.models import architecture, missing_model

# model.fused_kernel_options.impl_backend values verl's patch_forward_with_backends patches the forward for
FUSED_BACKENDS = ("torch", "triton", "liger")
TP_KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"
UTIL_KEY = "actor_rollout_ref.rollout.gpu_memory_utilization"
# the passes on fixed micro-batches: (section, the per-GPU key the workers read, the legacy key validate_config
# also accepts)
MICRO_KEYS = (("actor", "ppo_micro_batch_size_per_gpu", "ppo_micro_batch_size"),
              ("rollout", "log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size"),
              ("ref", "log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size"))


# check: its name in the table; source: the code it restates or calls; how: restated or called, and the test that
# pins it; run(Run); needs: the rules that must pass first (this one reads what they check)
Rule = namedtuple("Rule", "check source how run needs")


RULES: list[Rule] = []


def rule(check: str, source: str, how: str, needs: tuple[str, ...] = ()):
    def add(fn):
        RULES.append(Rule(check, source, how, fn, needs))
        return fn
    return add


def table() -> list[str]:
    """The rules as docs/slurm.md's markdown table."""
    return ["| check | refused when | source (verl 0.9.1, vLLM) | how |", "|---|---|---|---|"] + [
        f"| {r.check} | {' '.join((r.run.__doc__ or '').split()).replace('``', '`')} | {r.source} | {r.how} |"
        for r in RULES]


class Run:
    """One run's config as the rules read it, and what they found: refusals (a line each), notes."""

    def __init__(self, config, workdir: Path, env, require_model: bool = False):
        from verl.trainer.ppo.utils import need_reference_policy

        self.config, self.workdir, self.env, self.require_model = config, Path(workdir), env, require_model
        self.aro = aro = config.actor_rollout_ref
        self.world = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
        self.arch = architecture(str(aro.model.path), self.workdir)
        self.length = int(config.data.max_prompt_length) + int(config.data.max_response_length)
        self.on_gpu = str(config.trainer.get("device", "cuda")) != "cpu"
        gib = (config.get("slurm") or {}).get("gpu_memory_gib")
        # the GPU's bytes where the memory rules apply: on GPUs, with the model's architecture known
        self.capacity = float(gib) * memory.GIB if self.on_gpu and gib is not None and self.arch else None
        r = aro.rollout
        self.parallel = (int(r.tensor_model_parallel_size), int(r.data_parallel_size),
                         int(r.pipeline_model_parallel_size))
        self.vllm = str(r.name) in memory.VLLM_NAMES
        # a reference model runs in its own worker, with the ref block's log-prob settings, when verl needs a
        # reference policy (use_kl_loss or use_kl_in_reward) and LoRA does not have the actor compute it with the
        # rollout block's (v1 PPOTrainer._setup's ref_in_actor: model.lora.rank, else lora_rank, > 0, or an adapter)
        rank = int((aro.model.get("lora") or {}).get("rank", 0) or 0) or int(aro.model.get("lora_rank", 0) or 0)
        self.ref_worker = bool(need_reference_policy(config)) and rank <= 0 and not aro.model.get("lora_adapter_path")
        # the LM head: "logits" (use_fused_kernels false), or the fused backend verl runs (liger's FusedLinearForPPO
        # falls back to its torch kernel where liger-kernel is not installed)
        backend = str((aro.model.get("fused_kernel_options") or {}).get("impl_backend"))
        self.head = ("logits" if not bool(aro.model.get("use_fused_kernels", False)) else
                     "torch" if backend == "liger" and not liger_installed() else backend)
        self.refusals, self.notes = [], []

    def refuse(self, key: str, value, problem: str, fix: str) -> None:
        """One line: the key and its value, what is wrong, the fix."""
        self.refusals.append(f"{key}={value}: {problem}; {fix}")

    def fixed(self, section: str) -> bool:
        """Whether the pass of ``section`` runs, on fixed micro-batches (the reference's only in its own worker)."""
        return (section != "ref" or self.ref_worker) and not memory.dynamic(self.config, section)


def liger_installed() -> bool:
    from verl.utils.experimental import torch_functional

    return torch_functional._LIGER_FUSED_LINEAR_SCALED_CROSS_ENTROPY is not None


def divides(rows: int, at_most: int) -> int:
    """The largest divisor of ``rows`` up to ``at_most``."""
    return max(d for d in range(1, max(1, min(rows, at_most)) + 1) if rows % d == 0)


def _tp_fits_heads(tp: int, heads: int, kv_heads: int) -> bool:
    """Whether vLLM shards attention over ``tp``: the attention heads split, and the KV heads split (at least tp of
    them) or replicate evenly (fewer)."""
    return heads % tp == 0 and (kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0)


@rule("rollout config", "`verl/workers/config/rollout.py` `RolloutConfig.__post_init__`", "called")
def rollout_config(run: Run) -> None:
    """verl's RolloutConfig refuses the rollout block (e.g. pipeline-parallel vLLM)."""
    from verl.utils.config import omega_conf_to_dataclass

    try:
        omega_conf_to_dataclass(run.aro.rollout)
    except Exception as exc:  # its assertions, ValueError, NotImplementedError, wrapped by Hydra's instantiate
        while exc.__cause__ is not None:
            exc = exc.__cause__
        message = " ".join(str(exc).split())
        # the setting verl's message names (the longest name in it: "pipeline_model_parallel_size" before "name")
        named = sorted((f for f in run.aro.rollout.keys() if f in message), key=len, reverse=True)[:1]
        run.refuse(".".join(["actor_rollout_ref.rollout", *named]), run.aro.rollout.get(named[0]) if named else
                   "(its settings)", f"verl's RolloutConfig refuses the rollout settings: {message}",
                   "change the setting verl's message names")


@rule("TP x DP x PP vs GPUs", "`verl/workers/engine_workers.py` `ActorRolloutRefWorker.init_model`",
      "restated; a test runs that `init_model` in-process on the same config", needs=("rollout config",))
def replica_size(run: Run) -> None:
    """A rollout replica's TP x DP x PP does not divide the GPUs (``world_size % (TP*DP*PP) != 0``)."""
    tp, dp, pp = run.parallel
    if run.world % (tp * dp * pp) == 0:
        return
    fits = [t for t in range(1, tp + 1) if run.world % (t * dp * pp) == 0]  # TPs that divide them
    key, value, example = TP_KEY, tp, f"{TP_KEY}={fits[-1]}" if fits else ""
    if not fits:  # data (or pipeline) parallelism is what does not divide the GPUs
        key, value = "actor_rollout_ref.rollout.data_parallel_size", dp
        example = (f"{key}={divides(run.world // pp, dp)} with TP 1" if run.world % pp == 0 else
                   "actor_rollout_ref.rollout.pipeline_model_parallel_size=1 and data_parallel_size=1")
    run.refuse(key, value, f"a rollout replica spans TP x DP x PP = {tp} x {dp} x {pp} = {tp * dp * pp} GPUs, which "
               f"does not divide the {run.world} GPU(s) of trainer.nnodes x trainer.n_gpus_per_node (verl's "
               "ActorRolloutRefWorker.init_model asserts world_size % (TP*DP*PP) == 0)",
               f"set TP x DP x PP to a divisor of {run.world}, e.g. {example}")


@rule("rollout replicas", "`verl/workers/rollout/replica.py` `RolloutReplica.__init__`; the count: `llm_server.py` "
      "`_initialize_llm_servers`", "called", needs=("TP x DP x PP vs GPUs",))
def replicas(run: Run) -> None:
    """A replica that spans nodes without taking whole nodes; the count is GPUs / (TP*DP*PP)."""
    from verl.workers.rollout.replica import RolloutReplica

    class Probe(RolloutReplica):  # launches nothing: constructing it runs verl's own checks
        async def launch_servers(self):  # pragma: no cover
            raise NotImplementedError

    tp, dp, pp = run.parallel
    try:
        Probe(replica_rank=0, config=run.aro.rollout, model_config=None,
              gpus_per_node=int(run.aro.rollout.n_gpus_per_node))
    except AssertionError as exc:
        return run.refuse(TP_KEY, tp, f"verl's RolloutReplica refuses the replica layout: {exc}",
                          "make TP x DP x PP at most the GPUs per node, or a multiple of them")
    run.notes.append(f"{run.world // (tp * dp * pp)} rollout replica(s) of TP {tp} x DP {dp} x PP {pp} on "
                     f"{run.world} GPU(s)")


@rule("`hf` rollout", "`fgrpo_verl/backends/hf_rollout/replica.py` `HFReplica` (fgrpo-verl's)", "restated",
      needs=("rollout replicas",))
def hf_replica(run: Run) -> None:
    """A replica of more than one GPU with fgrpo-verl's hf rollout (``backend=gpu_hf``/``cpu``)."""
    tp, dp, pp = run.parallel
    if str(run.aro.rollout.name) == "hf" and tp * dp * pp != 1:
        run.refuse(TP_KEY, tp, f"rollout.name=hf serves one model copy per GPU, but a replica spans TP x DP x PP = "
                   f"{tp * dp * pp} GPUs", f"set {TP_KEY}=1 (and data/pipeline parallel 1), or use the vLLM rollout")


@rule("attention heads vs TP", "vLLM's `ModelConfig.verify_with_parallel_config`, `QKVParallelLinear`",
      "restated; a test builds vLLM's `QKVParallelLinear` at each TP", needs=("rollout replicas",))
def heads(run: Run) -> None:
    """Attention heads not divisible by TP; KV heads neither divisible by TP nor, when TP is larger, dividing it
    (vLLM splits the KV heads or replicates them)."""
    if run.arch is None or not run.vllm:
        return
    (tp, dp, pp), n, kv = run.parallel, run.arch.num_attention_heads, run.arch.num_key_value_heads
    valid = [t for t in range(1, tp + 1) if _tp_fits_heads(t, n, kv) and run.world % (t * dp * pp) == 0]
    example = f", e.g. {TP_KEY}={valid[-1]}" if valid else ""
    if n % tp:
        run.refuse(TP_KEY, tp, f"the model's {n} attention heads do not split over TP {tp} (vLLM's "
                   "ModelConfig.verify_with_parallel_config)", f"use a TP that divides {n}{example}")
    elif not _tp_fits_heads(tp, n, kv):
        run.refuse(TP_KEY, tp, f"the model's {kv} KV heads neither split over TP {tp} nor replicate evenly across it "
                   "(vLLM's QKVParallelLinear asserts KV heads % TP == 0, or TP % KV heads == 0 when TP is the "
                   f"larger)", f"use a TP that divides {kv} or a multiple of {kv} that divides {n}{example}")


@rule("vLLM scheduler", "vLLM's `SchedulerConfig`, after `vllm_async_server.py` `_validate_configs`", "restated; "
      "a test runs verl's `_validate_configs`, then vLLM's `SchedulerConfig`, on the same numbers either side",
      needs=("rollout replicas",))
def scheduler(run: Run) -> None:
    """``max_num_batched_tokens < max_num_seqs`` on the budget verl hands vLLM: with ``enable_chunked_prefill=false``
    verl first raises it to ``max_model_len`` (``max_position_embeddings`` when unset)."""
    rollout = run.aro.rollout
    tokens, seqs, raised = int(rollout.max_num_batched_tokens), int(rollout.max_num_seqs), ""
    positions = None if run.arch is None else run.arch.max_position_embeddings
    if str(rollout.name) != "vllm" or tokens >= seqs:
        return
    if not rollout.enable_chunked_prefill:
        mml = rollout.max_model_len if rollout.max_model_len is not None else positions
        if mml is None:
            return run.notes.append(f"max_num_batched_tokens={tokens} < max_num_seqs={seqs}: verl raises it to the "
                                    "model's max_position_embeddings (unknown here), not checked")
        raised = f" (without chunked prefill verl raises it to max_model_len={mml}, still below)"
        tokens = max(tokens, int(mml))
    if tokens < seqs:
        other = f" or actor_rollout_ref.rollout.max_model_len={seqs}" if raised and (
            positions is None or seqs <= positions) else ""
        run.refuse("actor_rollout_ref.rollout.max_num_batched_tokens", rollout.max_num_batched_tokens,
                   f"vLLM's scheduler needs at least max_num_seqs={seqs} tokens per step (SchedulerConfig: "
                   f"max_num_batched_tokens >= max_num_seqs){raised}",
                   f"raise it to {seqs}{other}, or lower actor_rollout_ref.rollout.max_num_seqs to {tokens}")


@rule("`backend=cpu_vllm`", "vLLM's CPU attention (head sizes); verl's `BucketedWeightSender`; "
      "`fgrpo_verl/backends/vllm_cpu_engine.py`", "restated", needs=("rollout replicas",))
def cpu_vllm(run: Run) -> None:
    """A head size vLLM's CPU attention lacks (refused at the first forward); an fp32 embedding over
    ``checkpoint_engine.update_weights_bucket_megabytes`` (asserted at the first sync); a bad
    ``FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S``."""
    from fgrpo_verl.backends import vllm_cpu_engine as engine

    if str(run.aro.rollout.name) != "vllm" or run.on_gpu:
        return
    try:
        engine.weight_sync_timeout_s(run.env)
    except ValueError as exc:
        run.refuse(engine.WEIGHT_SYNC_TIMEOUT_ENV, "(environment)", str(exc), "unset it or give seconds > 0")
    if run.arch is not None and run.arch.head_dim not in engine.CPU_HEAD_SIZES:
        run.refuse("actor_rollout_ref.model.path", run.aro.model.path, f"its attention head size {run.arch.head_dim} "
                   "has no kernel in vLLM's CPU attention, which refuses it at the engine's first forward",
                   f"use a model whose head size is one of {', '.join(map(str, engine.CPU_HEAD_SIZES))}, or the hf "
                   "rollout (backend=cpu)")
    key = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
    bucket = int(run.aro.rollout.checkpoint_engine.update_weights_bucket_megabytes)
    needed = 0 if run.arch is None else engine.bucket_megabytes_needed(run.arch.vocab_size, run.arch.hidden_size)
    if bucket < needed:
        run.refuse(key, bucket, f"the model's embedding ({run.arch.vocab_size} x {run.arch.hidden_size} fp32) does "
                   "not fit one weight-sync bucket, and verl's weight sender refuses a tensor larger than its bucket",
                   f"set {key}={needed} or more")


@rule("fused kernels", "`verl/models/transformers/monkey_patch.py` `patch_forward_with_backends`; "
      "`verl/utils/kernel/kernels.py` `efficient_entropy_forward`", "restated; a test runs verl's patch on a tiny "
      "model")
def kernels(run: Run) -> None:
    """``model.use_fused_kernels=true`` with ``fused_kernel_options.impl_backend`` other than torch, triton or liger:
    verl leaves the model's own forward, and its engine reads the ``output.log_probs`` that forward never sets;
    triton on ``trainer.device=cpu`` or with a hidden size that is not a multiple of 128."""
    key, backend = "actor_rollout_ref.model.fused_kernel_options.impl_backend", run.head
    if backend not in ("logits", *FUSED_BACKENDS):
        run.refuse(key, (run.aro.model.get("fused_kernel_options") or {}).get("impl_backend"),
                   "verl patches the model's forward for fused kernels only with torch, triton or liger "
                   "(monkey_patch.py patch_forward_with_backends skips any other value), so the model returns logits "
                   "and verl's engine reads output.log_probs, which it never set: the first log-prob pass fails",
                   f"set it to one of {', '.join(FUSED_BACKENDS)}, or actor_rollout_ref.model.use_fused_kernels=false")
    elif backend == "triton" and not run.on_gpu:
        run.refuse(key, backend, "verl's Triton kernel (kernels.py efficient_entropy_forward) asserts CUDA tensors, "
                   "and trainer.device is cpu", "use impl_backend=torch on CPU")
    elif backend == "triton" and run.arch is not None and run.arch.hidden_size % 128:
        run.refuse(key, backend, f"the model's hidden size {run.arch.hidden_size} is not a multiple of 128 (verl's "
                   "Triton kernel, kernels.py efficient_entropy_forward, asserts hidden_size % 128 == 0)",
                   "use impl_backend=torch")


@rule("`max_model_len`", "`verl/workers/rollout/vllm_rollout/vllm_async_server.py` `_validate_configs`", "restated")
def max_model_len(run: Run) -> None:
    """``rollout.max_model_len`` above the model's ``max_position_embeddings`` (verl's vLLM server refuses it)."""
    mml, arch = run.aro.rollout.get("max_model_len"), run.arch
    if mml is not None and arch is not None and int(mml) > arch.max_position_embeddings:
        run.refuse("actor_rollout_ref.rollout.max_model_len", mml, f"above the model's max_position_embeddings="
                   f"{arch.max_position_embeddings} (verl's vLLM server refuses it at start)",
                   f"set it to {min(arch.max_position_embeddings, run.length)} or less")


@rule("prompt + response vs `max_model_len`", "fgrpo-verl's policy: verl runs it, and its vLLM server's `generate` "
      "cuts each response to `max_model_len` - prompt tokens", "policy", needs=("`max_model_len`",))
def response_budget(run: Run) -> None:
    """Prompt + response above ``max_model_len`` (unset: ``max_position_embeddings``). The runs compare response
    budgets (``data.max_response_length``) and a silent cut would give the longer prompts less, with nothing in the
    logs: refused, naming the prompts that would be cut and both fixes."""
    key, mml = "actor_rollout_ref.rollout.max_model_len", run.aro.rollout.get("max_model_len")
    positions = None if run.arch is None else run.arch.max_position_embeddings
    effective = int(mml) if mml is not None else positions
    if effective is None or effective >= run.length:
        return
    prompt, room = int(run.config.data.max_prompt_length), effective - int(run.config.data.max_response_length)
    cut = "every response" if room <= 0 else f"the responses to prompts over {room} tokens"
    what = key if mml is not None else "the model's max_position_embeddings"
    run.refuse(key, mml, f"prompt + response = data.max_prompt_length + data.max_response_length = {run.length} "
               f"tokens does not fit {what} ({effective}): verl would run and cut {cut} to {effective} - prompt "
               "tokens (its vLLM server's generate); fgrpo-verl's policy, not verl's, refuses it so that every "
               "sample gets the full response budget",
               (f"shorten data.max_response_length to {effective - prompt}" if effective > prompt else
                f"data.max_prompt_length={prompt} alone fills {effective} tokens: shorten the prompts and the "
                f"responses to {effective} tokens together")
               + (f" or raise {key} to {run.length}" if positions is None or positions >= run.length else ""))


@rule("mini-batch per GPU", "`verl/workers/engine_workers.py` `TrainingWorker.train_mini_batch`", "restated")
def mini_batch(run: Run) -> None:
    """``ppo_mini_batch_size x n`` not a multiple of the data-parallel size, with dynamic batch sizes too."""
    (dp, _, mini), actor, n = memory.batch_layout(run.config, run.world), run.aro.actor, int(run.aro.rollout.n)
    if mini % dp:
        run.refuse("actor_rollout_ref.actor.ppo_mini_batch_size", actor.ppo_mini_batch_size,
                   f"a mini-batch of {actor.ppo_mini_batch_size} prompts x rollout.n={n} = {mini} samples does not "
                   f"split over the {dp} data-parallel GPU(s) (verl's TrainingWorker.train_mini_batch asserts "
                   "mini_batch_size % dp == 0" + (", with dynamic batch sizes too" if actor.use_dynamic_bsz else "")
                   + ")", f"make ppo_mini_batch_size x {n} a multiple of {dp}")


@rule("per-GPU micro-batch keys", "`verl/workers/engine_workers.py` `ActorRolloutRefWorker.init_model`; "
      "`verl/workers/engine/utils.py` `prepare_micro_batches`", "restated; a test runs `prepare_micro_batches` on "
      "the reference worker's null micro-batch")
def per_gpu_keys(run: Run) -> None:
    """A pass on fixed micro-batches whose ``*_per_gpu`` key is null. verl's ``validate_config`` accepts the legacy
    global keys (``actor.ppo_micro_batch_size``, ``rollout.`` / ``ref.log_prob_micro_batch_size``) in their place, but
    the workers read only the per-GPU ones: ``init_model`` asserts the actor's and the rollout's are set, and hands
    the reference worker's to ``prepare_micro_batches``, which fails on None. The reference worker runs when verl
    needs a reference policy (``use_kl_loss`` or ``use_kl_in_reward``) without LoRA (``trainer_base.py``
    ``_setup``: with LoRA the actor computes it, ``ref_in_actor``, with the rollout block's settings)."""
    dp = memory.batch_layout(run.config, run.world)[0]
    for section, per_gpu, legacy_name in MICRO_KEYS:
        old, legacy = run.aro[section].get(legacy_name), f"actor_rollout_ref.{section}.{legacy_name}"
        if run.fixed(section) and run.aro[section].get(per_gpu) is None:
            how = "hands it to prepare_micro_batches" if section == "ref" else "asserts it is set"
            run.refuse(f"actor_rollout_ref.{section}.{per_gpu}", None, f"verl's workers size this pass's "
                       f"micro-batches by it alone (ActorRolloutRefWorker.init_model {how})" + (
                           f"; the legacy {legacy}={old} passes validate_config and is never read" if old else ""),
                       f"set it (samples per GPU), e.g. {max(1, int(old) // dp)} = {old} over {dp} GPU(s), and "
                       f"remove {legacy}" if old else "set it (samples per GPU)")


@rule("micro-batches", "`verl/workers/engine/utils.py` `prepare_micro_batches`; v1 first pads the batch to a "
      "multiple of lcm(dp, mini x n): `trainer_base.py` `_get_required_batch_multiple`", "restated; a test runs "
      "`prepare_micro_batches` on the same sizes either side", needs=("mini-batch per GPU",))
def micro_batches(run: Run) -> None:
    """A GPU's share of a mini-batch (update) or of the batch (log-probs: actor, reference) not a multiple of its
    micro-batch; not checked for a pass with dynamic batch sizes."""
    padded = memory.batch_layout(run.config, run.world)[1]
    for section, per_gpu, _ in MICRO_KEYS:
        micro, rows = run.aro[section].get(per_gpu), memory.pass_rows(run.config, run.world, section)
        if not run.fixed(section) or micro is None:
            continue
        if rows % int(micro):
            share = "each GPU's share of a mini-batch is" if section == "actor" else "each GPU computes log-probs of"
            run.refuse(f"actor_rollout_ref.{section}.{per_gpu}", micro, f"{share} {rows} samples, not a multiple of "
                       f"it (verl's prepare_micro_batches asserts it)", f"use a divisor of {rows}, e.g. "
                       f"{divides(rows, int(micro))}")
        elif section == "actor":
            run.notes.append(f"{padded} samples per step, {rows // int(micro)} micro-batch(es) of {micro} per GPU per "
                             "update")
    if padded != int(run.config.data.train_batch_size) * int(run.aro.rollout.n):
        run.notes.append(f"verl pads each training batch to {padded} samples (a multiple of lcm(dp, mini x n))")
    if run.aro.actor.use_dynamic_bsz:
        run.notes.append(f"{padded} samples per step; dynamic batch sizes: verl packs each micro-batch up to its "
                         "token budget (no micro-batch divisibility)")


@rule("token budgets (`use_dynamic_bsz`)", "`engine_workers.py` `ActorRolloutRefWorker.init_model`; "
      "`prepare_micro_batches`; `verl/utils/seqlen_balancing.py` `rearrange_micro_batches`",
      "restated; a test runs `prepare_micro_batches` either side")
def budgets(run: Run) -> None:
    """``rollout.log_prob_use_dynamic_bsz`` not the actor's ``use_dynamic_bsz``, or ``actor.ppo_max_token_len_per_gpu``
    / ``rollout.log_prob_max_token_len_per_gpu`` unset (``init_model`` asserts them); the reference worker's
    ``ref.log_prob_max_token_len_per_gpu`` unset (None x SP fails). A budget x Ulysses SP below prompt + response is
    a warning, not a refusal: ``rearrange_micro_batches`` asserts the budget x SP holds the longest *real* sequence
    of a GPU's batch (v1 hands the workers unpadded, nested sequences), so only a step with a longer one stops."""
    aro, dynamic = run.aro, bool(run.aro.actor.use_dynamic_bsz)
    if dynamic != bool(aro.rollout.get("log_prob_use_dynamic_bsz", False)):
        run.refuse("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", not dynamic, f"actor_rollout_ref.actor."
                   f"use_dynamic_bsz is {dynamic} (verl's ActorRolloutRefWorker.init_model asserts "
                   "actor.use_dynamic_bsz == rollout.log_prob_use_dynamic_bsz)",
                   f"set it to {str(dynamic).lower()}, or leave it unset (it follows the actor's)")
    why = "verl's ActorRolloutRefWorker.init_model asserts it is set when actor.use_dynamic_bsz is true"
    found = [("actor", "ppo", why, "each update micro-batch"), ("rollout", "log_prob", why, "each log-prob "
                                                                "micro-batch")] if dynamic else []
    if run.ref_worker and memory.dynamic(run.config, "ref"):
        found.append(("ref", "log_prob", "the reference worker sizes its micro-batches by it (ref.log_prob_use_"
                      "dynamic_bsz) and verl's prepare_micro_batches fails on an unset one (None x sequence-parallel "
                      "size)", "each reference log-prob micro-batch"))
    for section, name, why, what in found:
        key, value = f"actor_rollout_ref.{section}.{name}_max_token_len_per_gpu", aro[section].get(
            f"{name}_max_token_len_per_gpu")
        sp = memory.sp(aro.ref if section == "ref" else aro.actor)
        fits, over = math.ceil(run.length / sp), f" x Ulysses SP {sp} = {int(value or 0) * sp}" if sp > 1 else ""
        if value is None:
            run.refuse(key, value, why, f"set it to the tokens one GPU may hold in {what}, at least {fits} (prompt + "
                       f"response = {run.length} tokens" + (f" / Ulysses SP {sp}" if sp > 1 else "")
                       + ") to admit every sequence")
        elif int(value) < 1:
            run.refuse(key, value, "no sequence fits it (verl's rearrange_micro_batches asserts the budget x the "
                       "sequence-parallel size >= the longest sequence)", f"set it to at least {fits}")
        elif int(value) * sp < run.length:
            run.notes.append(f"warning: {key}={value}{over} tokens < prompt + response = {run.length}: verl's "
                             f"rearrange_micro_batches stops the run at the first step with a sequence over "
                             f"{int(value) * sp} tokens (it asserts the budget holds the longest real sequence); "
                             f"shorter steps train; {fits} admits every length")


# samples a sync v1 step keeps in TransferQueue at once: the training batch after v1's upsampling, one validation
# batch (its prompts, None where unknown here, x val_kwargs.n), whether validation runs beside the training batch
# (trainer.test_freq > 0) or at all, and the most at once
StorageLoad = namedtuple("StorageLoad", "train val val_prompts beside validates live")


def storage_load(config, workdir: Path) -> StorageLoad:
    """The :class:`StorageLoad` of ``config`` (validation rows read from ``data.val_files`` under ``workdir``)."""
    from fgrpo_verl.data.records import parquet_rows

    trainer, data = config.trainer, config.data
    train = memory.batch_layout(config, int(trainer.nnodes) * int(trainer.n_gpus_per_node))[1]
    rows, batch = parquet_rows(data.get("val_files"), Path(workdir)), data.get("val_batch_size")
    prompts = rows if batch is None else (int(batch) if rows is None else min(int(batch), rows))
    beside, before = int(trainer.test_freq) > 0, bool(trainer.get("val_before_train", True))
    val = (prompts or 0) * int(config.actor_rollout_ref.rollout.val_kwargs.n) if beside or before else 0
    return StorageLoad(train, val, prompts, beside, beside or before,
                       max(train + (val if beside else 0), val if before else 0))


@rule("TransferQueue", "`transfer_queue/storage/simple_storage.py` `StorageUnitData.put_data` (\"Storage capacity "
      "exceeded\")", "restated; a verl run at the bound passes and one slot per unit below fails")
def transfer_queue(run: Run) -> None:
    """The fullest storage unit over ceil(``total_storage_size`` / ``num_data_storage_units``). The v1 trainer holds
    a step's training batch until the step is logged and validates before that, one batch of
    ``data.val_batch_size`` prompts (all when null) x ``val_kwargs.n`` at a time: the largest load is their sum
    (validation alone for ``val_before_train``); sample i lives in unit i mod units. Dynamic sampling and the async
    trainer modes hold more: not modelled."""
    backend = run.config.get("transfer_queue", {}).get("backend", {})
    simple = backend.get("SimpleStorage", {})
    total = simple.get("total_storage_size")
    if backend.get("storage_backend", "SimpleStorage") != "SimpleStorage" or total is None:
        return
    units, load = int(simple.get("num_data_storage_units", 1)), storage_load(run.config, run.workdir)
    if load.validates and load.val_prompts is None:
        run.notes.append("validation batch unknown here (data.val_files not found, data.val_batch_size null): "
                         "TransferQueue capacity checked for the training batch only")
    per_unit, val_n = math.ceil(int(total) / units), int(run.aro.rollout.val_kwargs.n)
    if math.ceil(load.live / units) <= per_unit:
        run.notes.append(f"TransferQueue holds at most {load.live} of {total} samples")
    elif load.val > load.train:
        room = (units * per_unit - (load.train if load.beside else 0)) // val_n  # validation prompts that fit
        run.refuse("data.val_batch_size", run.config.data.get("val_batch_size"),
                   f"validation puts {load.val_prompts} prompts x val_kwargs.n={val_n} = {load.val} samples into "
                   f"TransferQueue" + (f" next to the {load.train}-sample training batch" if load.beside else "")
                   + f" ({load.live} in all), over its capacity of {total} (transfer_queue.backend.SimpleStorage."
                   "total_storage_size; TransferQueue refuses with 'Storage capacity exceeded')",
                   f"validate in batches, data.val_batch_size={room} or fewer" if room >= 1
                   else f"raise total_storage_size to {load.live}")
    else:
        run.refuse("transfer_queue.backend.SimpleStorage.total_storage_size", total, f"a step holds {load.live} "
                   f"samples in TransferQueue ({units} unit(s) of {per_unit}), more than it stores ('Storage capacity "
                   f"exceeded')", f"raise it to {load.live} or more")


@rule("vLLM start", "vLLM's `vllm/v1/worker/utils.py` `request_memory`", "restated; a test runs it on the same "
      "numbers either side")
def vllm_start(run: Run) -> None:
    """The actor's parameters on the GPU when vLLM starts (after the actor's ``init_model``; none with
    ``param_offload``) + ``gpu_memory_utilization`` x the GPU > the GPU: vLLM refuses to start with less free memory
    than its share."""
    if not run.capacity or not run.vllm:
        return
    start = memory.states(run.config, run.arch.params, run.world)["start"]
    m, share = run.capacity, float(run.aro.rollout.gpu_memory_utilization) * run.capacity
    if start + share > m:
        run.refuse(UTIL_KEY, run.aro.rollout.gpu_memory_utilization, f"vLLM starts beside {memory.gib(start)} GiB "
                   "per GPU of the actor's parameters (after its init_model; AdamW's moments come at the first update) "
                   f"and asks for {memory.gib(share)} GiB free: {memory.gib(start + share)} GiB > {memory.gib(m)} GiB "
                   "(slurm.gpu_memory_gib); vLLM's request_memory refuses to start",
                   memory.share_fix(m, start, memory.kv_cache(run.config, run.arch, m)[4],
                                    "actor_rollout_ref.actor.fsdp_config.param_offload=true"))


@rule("vLLM KV cache", "vLLM's `vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory`", "restated")
def kv_cache(run: Run) -> None:
    """vLLM's share less its bf16 weights (2 P / TP) holds less than one ``max_model_len`` sequence (unset: the
    model's ``max_position_embeddings``) at 2 x layers x ceil(KV heads / TP) x head size x 2 B per token."""
    if not run.capacity or not run.vllm:
        return
    rollout, tp = run.aro.rollout, run.parallel[0]
    weights, room, per_token, mml, share = memory.kv_cache(run.config, run.arch, run.capacity)
    if room < per_token * mml:  # the share that holds it is offered where vLLM still starts beside the parameters
        start = memory.states(run.config, run.arch.params, run.world)["start"] / run.capacity
        run.refuse(UTIL_KEY, rollout.gpu_memory_utilization, f"vLLM's KV cache (at most {memory.gib(max(room, 0.0))} "
                   f"GiB after {memory.gib(weights)} GiB of weights) holds fewer than max_model_len={mml} tokens (vLLM "
                   f"refuses to start)", f"set actor_rollout_ref.rollout.max_model_len={run.length} (prompt + "
                   f"response){f', raise it to {share:.2f}' if share + start <= 1 else ''}, or raise TP above {tp}")


@rule("model states", "`verl/workers/engine/base.py` `BaseEngineCtx._context_switch` (train mode loads offloaded "
      "states); `verl/workers/engine/fsdp/utils.py` `create_device_mesh` (`fsdp_size`); torch's AdamW", "restated")
def model_states(run: Run) -> None:
    """An ``fsdp_size`` below the GPUs that does not divide them (0 or null included: verl's mesh fails); the update's
    parameters, gradients and AdamW moments (16 B per parameter in fp32; LoRA: the frozen weights alone) over the
    GPUs FSDP shards them over (``fsdp_size`` if 0 < it < the GPUs, else all) > one GPU: verl loads them back for the
    update even with param/optimizer offload; only FSDP2's ``offload_policy`` keeps them on host."""
    size = (run.config.actor_rollout_ref.actor.get("fsdp_config") or {}).get("fsdp_size", -1)  # null: verl compares it
    if size is None or 0 <= size < run.world and (size == 0 or run.world % size):
        return run.refuse("actor_rollout_ref.actor.fsdp_config.fsdp_size", size, "verl's device mesh of (GPUs // "
                          f"fsdp_size, fsdp_size) does not cover the {run.world} GPUs",
                          f"use -1 (all) or one of {[d for d in range(1, run.world) if run.world % d == 0]}")
    update = memory.states(run.config, run.arch.params, run.world)["update"] if run.capacity else 0.0
    group = memory.shards(run.config, run.world)
    if run.capacity and update > run.capacity:
        run.refuse(*(("actor_rollout_ref.actor.fsdp_config.fsdp_size", group) if group < run.world else
                     ("trainer.n_gpus_per_node", run.config.trainer.n_gpus_per_node)), f"the update holds "
                   f"{memory.gib(update)} GiB per GPU of the actor's parameters, gradients and AdamW moments (sharded "
                   f"over {group} GPU(s)), on the GPU even with param/optimizer offload, > {memory.gib(run.capacity)} "
                   "GiB (slurm.gpu_memory_gib)", (f"raise it (-1: all {run.world} GPUs)" if group < run.world else
                                                  "use more GPUs (trainer.nnodes / trainer.n_gpus_per_node)")
                   + ", or FSDP2's CPU offload (backend=gpu_fsdp2 with "
                   "actor_rollout_ref.actor.fsdp_config.offload_policy=true)")


@rule("model files", "fgrpo-verl's (jobs run with `HF_HUB_OFFLINE=1`)", "file checks (submit and job start only)")
def model_files(run: Run) -> None:
    """The model is not here: a Hub id not in the Hugging Face cache, a snapshot that lacks a weight shard its index
    lists, a local directory that does not exist (docs/slurm.md §1)."""
    missing = missing_model(str(run.aro.model.path), run.workdir) if run.require_model else None
    if missing is not None:
        run.refuse("actor_rollout_ref.model.path", str(run.aro.model.path), *missing)
