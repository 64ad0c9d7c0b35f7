"""Preflight: verl 0.9.1's worker start-up checks, and whether the run fits, before anything reaches a GPU queue.

``verl``'s ``validate_config`` (run by ``fgrpo_verl.integration.validation.validate``) stops where the workers'
start-up begins: a config it accepts can still be refused minutes into a GPU allocation. :func:`run` checks what
comes after, on the composed config, and raises :class:`PreflightError`: one line per refusal, naming the key, its
value and the fix. ``fgrpo-verl launch`` (submit and ``--dry-run``), ``fgrpo-verl doctor --recipe`` and the plain
``slurm/train.sbatch`` path (``python -m fgrpo_verl.launch.jobenv``) call it. verl's own code runs the check where
it can be called on a config alone; the others restate verl's rule and a test pins each one to verl's behaviour
(tests/test_preflight_on_cpu.py).

A refusal is *certain* (a verl, vLLM or TransferQueue rule, restated or called: the run would stop), fgrpo-verl's
*policy* (prompt + response over max_model_len: verl would run it, cutting responses; the line says so), or an
*estimate* (the GPU-memory rules below, :meth:`_Checks.check_memory`). ``FGRPO_PREFLIGHT_MEMORY=warn`` in the job's
environment (this process's, or a recipe's ``env:`` over it) turns the estimate refusals into notes that keep their
numbers; unset or ``refuse`` refuses them; any other value is refused. Certain refusals never yield to it.

======================================  =====================================================================
check                                   verl (or vLLM / TransferQueue) source, and how it is checked here
======================================  =====================================================================
rollout config                          ``verl/workers/config/rollout.py`` ``RolloutConfig.__post_init__``:
                                        called (``omega_conf_to_dataclass``)
rollout TP x DP x PP vs world size      ``verl/workers/engine_workers.py`` ``ActorRolloutRefWorker.init_model``
                                        asserts ``world_size % (TP*DP*PP) == 0``: restated (needs a worker);
                                        pinned by running that ``init_model`` in-process on the same config
hf rollout (fgrpo-verl's)               ``fgrpo_verl/backends/hf_rollout/replica.py`` ``HFReplica``: one GPU per
                                        replica; restated
rollout replicas                        ``verl/workers/rollout/llm_server.py`` ``_initialize_llm_servers``
                                        (``world_size // (TP*DP*PP)`` replicas) and ``verl/workers/rollout/
                                        replica.py`` ``RolloutReplica.__init__`` (a replica spanning nodes uses
                                        whole nodes): the replica's ``__init__`` is called
mini-batch per GPU                      ``verl/workers/engine_workers.py`` ``TrainingWorker.train_mini_batch``
                                        asserts ``ppo_mini_batch_size * n % dp == 0``, with dynamic batch sizes
                                        too: restated
micro-batch per GPU (update, log-prob)  ``verl/workers/engine/utils.py`` ``prepare_micro_batches`` asserts the
                                        per-GPU batch is a multiple of the micro-batch: called on a dummy batch
                                        of the per-GPU size (after v1's upsampling, ``trainer_base.py``
                                        ``_get_required_batch_multiple``: a multiple of lcm(dp, mini x n)). Not
                                        with dynamic batch sizes (no fixed micro-batch), per pass: the actor's
                                        ``use_dynamic_bsz``, the reference's ``log_prob_use_dynamic_bsz``
token budgets (``use_dynamic_bsz``)     ``engine_workers.py`` ``ActorRolloutRefWorker.init_model`` asserts
                                        ``actor.use_dynamic_bsz == rollout.log_prob_use_dynamic_bsz`` and both
                                        budgets (``actor.ppo_max_token_len_per_gpu``, ``rollout.log_prob_max_
                                        token_len_per_gpu``) set: restated; the reference worker's
                                        ``ref.log_prob_max_token_len_per_gpu`` unset fails in
                                        ``prepare_micro_batches`` (None x SP): called. A budget x Ulysses SP
                                        below prompt + response is a note, not a refusal: ``verl/utils/
                                        seqlen_balancing.py`` ``rearrange_micro_batches`` asserts the budget x SP
                                        >= the longest *real* sequence of the GPU's batch (v1 hands workers nested
                                        tensors, no padding), so only a step with a longer sequence stops
reference worker                        ``verl/trainer/ppo/v1/trainer_base.py`` ``_setup``: a reference model runs
                                        (``need_reference_policy``: ``use_kl_loss`` or ``use_kl_in_reward``) in
                                        its own worker unless LoRA (``model.lora.rank``, else ``model.lora_rank``,
                                        > 0, or ``model.lora_adapter_path``) makes the actor compute it
                                        (``ref_in_actor``, with the rollout block's log-prob settings): restated
fused kernels                           ``verl/models/transformers/monkey_patch.py`` ``patch_forward_with_backends``
                                        patches the forward only for ``fused_kernel_options.impl_backend`` torch,
                                        triton or liger; with any other value the model returns logits and
                                        ``FSDPEngine.prepare_model_outputs`` reads ``output.log_probs``, never
                                        set: restated, pinned by verl's function on a tiny model. triton:
                                        ``verl/utils/kernel/kernels.py`` ``efficient_entropy_forward`` asserts
                                        CUDA tensors and ``hidden_size % 128 == 0``: restated
TransferQueue capacity                  ``transfer_queue/storage/simple_storage.py`` ``StorageUnitData.put_data``
                                        ("Storage capacity exceeded"): each of the ``num_data_storage_units`` holds
                                        ceil(total_storage_size / units) samples and sample i lives in unit
                                        i mod units; restated, pinned by a verl run on each side of the bound
max_model_len                           ``verl/workers/rollout/vllm_rollout/vllm_async_server.py``
                                        ``_validate_configs`` (max_model_len <= max_position_embeddings; unset =
                                        max_position_embeddings): restated. prompt + response over it: verl runs
                                        and ``generate`` cuts those responses (max_tokens = max_model_len -
                                        prompt); refused as fgrpo-verl's policy, not verl's (the message says so)
vLLM scheduler                          vLLM's ``SchedulerConfig`` (max_num_batched_tokens >= max_num_seqs) on
                                        the budget verl passes: without chunked prefill ``_validate_configs``
                                        first raises it to max_model_len. Restated; pinned by verl's
                                        ``_validate_configs`` and vLLM's class on the same numbers
attention heads vs TP                   vLLM's ``ModelConfig.verify_with_parallel_config`` (heads % TP == 0) and
                                        ``QKVParallelLinear`` (KV heads % TP == 0, or TP % KV heads == 0 when
                                        TP is larger: replicated). Restated; pinned by vLLM's layer
memory per GPU                          the estimate below (estimate refusals: ``FGRPO_PREFLIGHT_MEMORY=warn``
                                        submits anyway)
model files                             a local directory or a complete snapshot in the Hugging Face cache
                                        (``fgrpo_verl/launch/models.py``); only where the run will start
======================================  =====================================================================

**The TransferQueue bound.** verl's v1 trainer keeps a step's training batch in TransferQueue until the step's
metrics are logged, and validates (``trainer.test_freq``) before that, one validation batch of
``data.val_batch_size`` prompts (all of them when null) at a time, so at its fullest it holds

    live = B' + V x val_kwargs.n        B' = data.train_batch_size x rollout.n, rounded up to a multiple of
                                        lcm(dp, ppo_mini_batch_size x n) (v1 pads the batch with dummy samples)
                                        V  = min(data.val_batch_size or V_rows, V_rows) validation prompts

(``V x val_kwargs.n`` alone for ``trainer.val_before_train``). The samples take the global indices 0..live-1, so
the fullest unit holds ceil(live / units), refused above ceil(total_storage_size / units). Dynamic sampling
(``algorithm.filter_groups``) and the async trainer modes keep more batches in flight: not modelled.

**The memory estimate** (bytes per GPU; a lower bound of the peak of a step whose micro-batches are full: fixed
micro-batches of full-length sequences, or, with dynamic batch sizes, micro-batches packed to their token budget,
which shorter sequences reach). W GPUs, P parameters, vocabulary V, hidden size H, L layers, KV heads K of dimension
D, T = data.max_prompt_length + data.max_response_length, M = the cluster's GPU memory (``slurm.gpu_memory_gib``,
set by the ``cluster`` group), u = ``rollout.gpu_memory_utilization``, SP = the Ulysses sequence-parallel size
(``actor.ulysses_sequence_parallel_size`` when > 1, else ``actor.fsdp_config``'s, as ``FSDPActorConfig`` reads it;
the reference's own for its pass). The actor's FSDP states resident on a GPU follow verl's phases
(:func:`fsdp_states` cites the code):

    start     S0 = 4 P / W      vLLM starts after the actor's init_model: fp32 params only (AdamW's moments are
                                allocated at the first optimizer step); 0 with param_offload
    rollout   S1 = 12 P / W     from the second step: params + AdamW m, v (gradients are freed when each update
                                ends); params 0 with param_offload, moments 0 with optimizer_offload
    update    S2 = 16 P / W     params + grads + moments, loaded back to the GPU even with param/optimizer offload
                                (0 only with FSDP2's offload_policy, which also zeroes S0 and S1)
    training  A = the largest of one micro-batch's activations in each of verl's passes (:func:`passes`), t the
                  micro-batch's tokens on one GPU:
                  update      t x 2 H L + head(t, train)   one bf16 hidden state per layer (gradient checkpointing)
                  log-probs   head(t, inference)           the actor's (also the reference's with LoRA,
                                                           ref_in_actor) and the reference worker's
              t = ceil(mb x T / SP)                 fixed micro-batches of mb samples (actor.ppo_micro_batch_size_
                                                    per_gpu; rollout. / ref.log_prob_micro_batch_size_per_gpu)
              t = ceil(min(B x SP, r x T) / SP)     use_dynamic_bsz: prepare_micro_batches packs a micro-batch up
                                                    to the budget B (actor.ppo_max_token_len_per_gpu; rollout. /
                                                    ref.log_prob_max_token_len_per_gpu) x SP tokens
                                                    (rearrange_micro_batches), and Ulysses gives each GPU 1/SP
                                                    of them; r = the GPU's samples of the pass (its share of a
                                                    mini-batch; of the batch)
              head: the LM head (model.use_fused_kernels, fused_kernel_options.impl_backend)
                  not fused        t x 2 V x 2 train, t x 2 V inference   bf16 logits (and their gradient)
                  torch            min(512, t) x V x 20 train (28 with the entropy in the loss: actor.entropy_coeff
                                   != 0 or actor.calculate_entropy), x 12 inference: verl's FusedLinearForPPO
                                   works in 512-token chunks (fp32 arrays of chunk x V, measured on verl's class);
                                   also liger where liger-kernel is not installed (verl falls back to it)
                  triton           t x 9504 x 2 train (the backward's d_logits has 9,504 columns whatever V),
                                   t x 12 ceil(V / 1024) inference
                  liger            0 where liger-kernel is installed (its kernel is not modelled)
    vLLM      u x M, of which 2 P / TP are bf16 weights and the rest KV cache at
                  2 x L x ceil(K / TP) x D x 2 bytes per token (K and V, bf16)

    refused when  S0 + u x M > M           (vLLM's request_memory refuses to start)
                  S1 + u x M > M           (the rollout of the second step runs out of memory)
                  S2 + A (+ u x M when rollout.free_cache_engine is false) > M    (the update)
                  u x M - 2 P / TP < KV of one max_model_len sequence             (vLLM refuses to start)

Not counted: CUDA context and allocator fragmentation, optimizer temporaries, FSDP's gathered (unsharded) layers
and the LM head's full-size gradient, vLLM's activation profile, the reference model's weights (``use_kl_loss``),
entropy over materialized logits (not fused: ``calculate_entropy``, the log-prob pass's entropy), the fused kernels'
per-token outputs, ``pad_to_length``'s bucket padding. The dry run states S2 + A, S1 + u x M, the KV cache and how
many full-length sequences of the replica's share of the batch it holds at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.launch.models import Architecture, architecture, missing_model

GIB = 2**30
# bytes per parameter of the actor's FSDP states: verl trains an fp32 copy (FSDPEngine._build_module: model_dtype fp32),
# fp32 gradients, AdamW's two fp32 moments
PARAM_BYTES = 4
GRAD_BYTES = 4
OPTIMIZER_BYTES = 8
# bytes per parameter of fsdp_config.model_dtype (verl's PrecisionType names)
DTYPE_BYTES = {"fp32": 4, "float32": 4, "32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "16": 2}
# bf16 activations
ACT_BYTES = 2
VLLM_NAMES = ("vllm", "sglang")
# model.fused_kernel_options.impl_backend values verl's patch_forward_with_backends patches the forward for
# (verl/models/transformers/monkey_patch.py)
FUSED_BACKENDS = ("torch", "triton", "liger")
# verl's FusedLinearForPPO (verl/utils/experimental/torch_functional.py) as the patched forward builds it
# (verl/models/transformers/dense_common.py forward_with_torch_backend: the default chunk_size, 512 tokens)
FUSED_CHUNK = 512
# bytes per element of one chunk x V that its torch kernel holds at its peak, measured on verl's class
# (tests/test_preflight_on_cpu.py): the update's backward (5 fp32 arrays), 7 with the entropy's gradient, the
# log-prob forward (3 fp32 arrays)
FUSED_TORCH_TRAIN, FUSED_TORCH_TRAIN_ENTROPY, FUSED_TORCH_INFER = 20, 28, 12
# verl's Triton kernel (verl/utils/kernel/kernels.py): efficient_entropy_backward's d_logits (the default
# _Split_Dlogits_N) has 9,504 columns whatever V, in the hidden states' dtype; efficient_entropy_forward keeps three
# fp32 (tokens, ceil(V / 1024)) arrays; it asserts hidden_size % 128 == 0
TRITON_DLOGITS_COLUMNS = 9504
TRITON_VOCAB_SPLIT = 1024
TRITON_HIDDEN_MULTIPLE = 128
# the job's environment variable that lets a run over the memory estimate be submitted (module docstring)
MEMORY_ENV = "FGRPO_PREFLIGHT_MEMORY"
MEMORY_MODES = ("refuse", "warn")
ESTIMATE_HINT = f"(an estimate: {MEMORY_ENV}=warn submits anyway, docs/slurm.md)"


@dataclass(frozen=True)
class Refusal:
    key: str
    value: object
    problem: str
    fix: str
    # an estimate (the GPU-memory rules) rather than a certain rule: FGRPO_PREFLIGHT_MEMORY=warn turns it into a note
    estimate: bool = False

    def line(self) -> str:
        text = f"{self.key}={self.value}: {self.problem}; {self.fix}"
        return f"{text} {ESTIMATE_HINT}" if self.estimate else text

    def bypassed(self) -> str:
        """The note of an estimate refusal that ``FGRPO_PREFLIGHT_MEMORY=warn`` let through: its numbers, and why."""
        return (f"{self.key}={self.value}: {self.problem}; over the estimate; submitted because "
                f"{MEMORY_ENV}=warn")


class PreflightError(ValueError):
    """One or more refusals; ``str()`` is one line per refusal."""

    def __init__(self, refusals: list[Refusal]):
        self.refusals = list(refusals)
        super().__init__("\n".join(r.line() for r in self.refusals))


@dataclass(frozen=True)
class Report:
    """What the checks found for a run that passed (the dry run prints :meth:`summary`)."""

    notes: tuple[str, ...]

    def summary(self) -> str:
        return "preflight: " + "; ".join(self.notes)


def _world(config) -> int:
    return int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)


def _parallel(rollout) -> tuple[int, int, int]:
    return (int(rollout.tensor_model_parallel_size), int(rollout.data_parallel_size),
            int(rollout.pipeline_model_parallel_size))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class _Checks:
    """Shared state of one run's checks: each ``check_*`` appends refusals and notes."""

    def __init__(self, config, workdir: Path, env=None):
        import os

        self.config = config
        self.workdir = Path(workdir)
        # the job's environment as the checks read it: this process's, or the one given (a recipe's `env:` over
        # the launcher's), so that a check gives the same verdict in whichever process runs it
        self.env = os.environ if env is None else env
        self.refusals: list[Refusal] = []
        self.notes: list[str] = []
        self.world = _world(config)
        self.rollout = config.actor_rollout_ref.rollout
        self.actor = config.actor_rollout_ref.actor
        self.arch: Architecture | None = architecture(str(config.actor_rollout_ref.model.path), self.workdir)
        self.length = int(config.data.max_prompt_length) + int(config.data.max_response_length)

    def refuse(self, key: str, value, problem: str, fix: str, estimate: bool = False) -> None:
        self.refusals.append(Refusal(key, value, problem, fix, estimate))

    # ------------------------------------------------------------------ FGRPO_PREFLIGHT_MEMORY
    def memory_mode(self) -> str:
        """``FGRPO_PREFLIGHT_MEMORY`` of the job's environment: "refuse" (unset or blank) or "warn"; another value
        is refused (a certain refusal: the estimate's refusals stand)."""
        raw = self.env.get(MEMORY_ENV, "")
        mode = raw.strip() or "refuse"
        if mode in MEMORY_MODES:
            return mode
        self.refuse(MEMORY_ENV, repr(raw), f"not one of its values ({', '.join(MEMORY_MODES)}, or unset)",
                    f"unset it, or set {MEMORY_ENV}=warn to submit a run over the memory estimate")
        return "refuse"

    # ------------------------------------------------------------------ rollout layout
    def check_rollout(self) -> None:
        """:meth:`_check_rollout`, once per distinct input in this process: verl's RolloutConfig and RolloutReplica
        constructions cost ~0.5 CPU-s a run (Hydra's instantiate), and a recipe's runs share a few rollout blocks
        (paper_main: 36 runs, 3 blocks) but for the run's name, which verl copies into
        ``rollout.trace.experiment_name`` (a label of traces, checked by nothing). The key is everything
        :meth:`_check_rollout` reads: the rollout block, the world size, the model's architecture as found here,
        ``trainer.device`` and the vLLM-on-CPU weight-sync timeout from the environment."""
        import json

        from omegaconf import OmegaConf

        block = OmegaConf.to_container(self.rollout, resolve=True)
        if isinstance(block.get("trace"), dict):
            block["trace"].pop("experiment_name", None)
        key = (json.dumps(block, sort_keys=True, default=str), self.world,
               repr(self.arch), str(self.config.trainer.get("device")),
               self.env.get("FGRPO_VLLM_WEIGHT_SYNC_TIMEOUT_S"))
        found = _ROLLOUT_VERDICTS.get(key)
        if found is None:
            refusals, notes = len(self.refusals), len(self.notes)
            self._check_rollout()
            found = _ROLLOUT_VERDICTS[key] = (tuple(self.refusals[refusals:]), tuple(self.notes[notes:]))
        else:
            self.refusals.extend(found[0])
            self.notes.extend(found[1])

    def _check_rollout(self) -> None:
        from verl.utils.config import omega_conf_to_dataclass

        try:
            rollout = omega_conf_to_dataclass(self.rollout)
        except Exception as exc:  # verl's RolloutConfig.__post_init__ (assertions, ValueError, NotImplementedError)
            while exc.__cause__ is not None:  # Hydra's instantiate wraps it
                exc = exc.__cause__
            message = " ".join(str(exc).split())
            # the rollout setting verl's message names (the longest field name in it: "pipeline_model_parallel_size"
            # before "name"), else the rollout block
            named = sorted((field for field in self.rollout.keys() if field in message), key=len, reverse=True)
            key = f"actor_rollout_ref.rollout.{named[0]}" if named else "actor_rollout_ref.rollout"
            value = self.rollout.get(named[0]) if named else "(its settings)"
            self.refuse(key, value, f"verl's RolloutConfig refuses the rollout settings: {message}",
                        "change the setting verl's message names")
            return
        tp, dp, pp = _parallel(rollout)
        per_replica = tp * dp * pp
        key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
        if self.world % per_replica:
            # the largest TP up to this one with which a replica divides the GPUs
            fits = [t for t in range(1, tp + 1) if self.world % (t * dp * pp) == 0]
            named, value = key, tp
            if fits:
                example = f"{key}={fits[-1]}"
            else:  # no TP fits: data (or pipeline) parallelism is what does not divide the GPUs
                named, value = "actor_rollout_ref.rollout.data_parallel_size", dp
                example = (f"{named}={_largest_divisor(self.world // pp, dp)} with TP 1" if self.world % pp == 0 else
                           "actor_rollout_ref.rollout.pipeline_model_parallel_size=1 and data_parallel_size=1")
            self.refuse(
                named, value,
                f"a rollout replica spans TP x DP x PP = {tp} x {dp} x {pp} = {per_replica} GPUs, "
                f"which does not divide the {self.world} GPU(s) of trainer.nnodes x trainer.n_gpus_per_node (verl's "
                "ActorRolloutRefWorker.init_model asserts world_size % (TP*DP*PP) == 0)",
                f"set TP x DP x PP to a divisor of {self.world}, e.g. {example}",
            )
            return
        try:
            _replica_probe()(replica_rank=0, config=self.rollout, model_config=None,
                             gpus_per_node=int(self.rollout.n_gpus_per_node))
        except AssertionError as exc:  # verl's RolloutReplica.__init__: a multi-node replica takes whole nodes
            self.refuse(key, tp, f"verl's RolloutReplica refuses the replica layout: {exc}",
                        "make TP x DP x PP at most the GPUs per node, or a multiple of them")
            return
        if rollout.name == "hf" and per_replica != 1:
            # fgrpo-verl's own hf rollout (backend=cpu, gpu_hf): HFReplica.launch_servers refuses a replica of more
            # than one GPU
            self.refuse(key, tp, f"rollout.name=hf serves one model copy per GPU, but a replica spans TP x DP x PP = "
                        f"{per_replica} GPUs", f"set {key}=1 (and data/pipeline parallel 1), or use the vLLM rollout")
            return
        replicas = self.world // per_replica
        self.notes.append(f"{replicas} rollout replica(s) of TP {tp} x DP {dp} x PP {pp} on {self.world} GPU(s)")
        if self.arch is not None and rollout.name in VLLM_NAMES:
            self.check_heads(tp, dp * pp)
        if rollout.name == "vllm" and str(self.config.trainer.get("device")) == "cpu":
            self.check_cpu_vllm()
        if rollout.name == "vllm":
            self.check_scheduler(rollout)

    def check_heads(self, tp: int, dp_pp: int) -> None:
        """vLLM shards attention over TP: ModelConfig.verify_with_parallel_config refuses attention heads that TP
        does not divide; QKVParallelLinear (every decoder's attention layer) splits the KV heads when there are at
        least TP of them (KV heads % TP == 0) and otherwise replicates them (TP % KV heads == 0), asserting each."""
        key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
        heads, kv = self.arch.num_attention_heads, self.arch.num_key_value_heads
        valid = [t for t in range(1, tp + 1) if _tp_fits_heads(t, heads, kv) and self.world % (t * dp_pp) == 0]
        example = f", e.g. {key}={valid[-1]}" if valid else ""
        if heads % tp:
            self.refuse(key, tp, f"the model's {heads} attention heads do not split over TP {tp} (vLLM's "
                        "ModelConfig.verify_with_parallel_config)", f"use a TP that divides {heads}{example}")
        elif not _tp_fits_heads(tp, heads, kv):
            self.refuse(key, tp, f"the model's {kv} KV heads neither split over TP {tp} nor replicate evenly across "
                        "it (vLLM's QKVParallelLinear asserts KV heads % TP == 0, or TP % KV heads == 0 when TP is "
                        f"the larger)", f"use a TP that divides {kv} or a multiple of {kv} that divides {heads}"
                        + example)

    def check_scheduler(self, rollout) -> None:
        """vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs, on the budget verl hands it: without
        chunked prefill verl's vLLM server (vllm_async_server.py ``_validate_configs``) first raises the budget to
        max_model_len (the model's max_position_embeddings when unset)."""
        key = "actor_rollout_ref.rollout.max_num_batched_tokens"
        tokens, seqs = int(rollout.max_num_batched_tokens), int(rollout.max_num_seqs)
        raised = ""
        if not rollout.enable_chunked_prefill:
            mml = rollout.max_model_len
            if mml is None and self.arch is None:
                if tokens < seqs:
                    self.notes.append(f"max_num_batched_tokens={tokens} < max_num_seqs={seqs}: verl raises it to the "
                                      "model's max_position_embeddings (unknown here), not checked")
                return
            mml = int(mml if mml is not None else self.arch.max_position_embeddings)
            raised = f" (without chunked prefill verl raises it to max_model_len={mml}, still below)"
            tokens = max(tokens, mml)
        if tokens < seqs:
            positions = None if self.arch is None else self.arch.max_position_embeddings
            other = (f" or actor_rollout_ref.rollout.max_model_len={seqs}"
                     if raised and (positions is None or seqs <= positions) else "")
            self.refuse(key, rollout.max_num_batched_tokens,
                        f"vLLM's scheduler needs at least max_num_seqs={seqs} tokens per step (SchedulerConfig: "
                        f"max_num_batched_tokens >= max_num_seqs){raised}",
                        f"raise it to {seqs}{other}, or lower actor_rollout_ref.rollout.max_num_seqs to {tokens}")

    def check_cpu_vllm(self) -> None:
        """backend=cpu_vllm: what vLLM's CPU build and verl's CPU weight sync refuse only after the job started."""
        from fgrpo_verl.backends import vllm_cpu_engine as engine

        try:
            engine.weight_sync_timeout_s(self.env)
        except ValueError as exc:
            self.refuse(engine.WEIGHT_SYNC_TIMEOUT_ENV, "(environment)", str(exc), "unset it or give seconds > 0")
        if self.arch is None:
            return
        model = "actor_rollout_ref.model.path"
        if self.arch.head_dim not in engine.CPU_HEAD_SIZES:
            self.refuse(model, self.config.actor_rollout_ref.model.path,
                        f"its attention head size {self.arch.head_dim} has no kernel in vLLM's CPU attention, which "
                        "refuses it at the engine's first forward",
                        f"use a model whose head size is one of {', '.join(map(str, engine.CPU_HEAD_SIZES))}, or the "
                        "hf rollout (backend=cpu)")
        key = "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes"
        bucket = int(self.rollout.checkpoint_engine.update_weights_bucket_megabytes)
        needed = engine.bucket_megabytes_needed(self.arch.vocab_size, self.arch.hidden_size)
        if bucket < needed:
            self.refuse(key, bucket,
                        f"the model's embedding ({self.arch.vocab_size} x {self.arch.hidden_size} fp32) does not fit one "
                        "weight-sync bucket, and verl's weight sender refuses a tensor larger than its bucket",
                        f"set {key}={needed} or more")

    # ------------------------------------------------------------------ batches
    def check_batches(self) -> None:
        dp, padded, mini = batch_layout(self.config, self.world)
        n = int(self.rollout.n)
        dynamic = bool(self.actor.use_dynamic_bsz)
        if mini % dp:  # asserted whatever sizes the micro-batches
            self.refuse(
                "actor_rollout_ref.actor.ppo_mini_batch_size", self.actor.ppo_mini_batch_size,
                f"a mini-batch of {self.actor.ppo_mini_batch_size} prompts x rollout.n={n} = {mini} samples does not "
                f"split over the {dp} data-parallel GPU(s) (verl's TrainingWorker.train_mini_batch asserts "
                "mini_batch_size % dp == 0" + (", with dynamic batch sizes too" if dynamic else "") + ")",
                f"make ppo_mini_batch_size x {n} a multiple of {dp}",
            )
            return
        per_gpu = mini // dp
        micro = self.actor.ppo_micro_batch_size_per_gpu
        micro_batches = None
        if not dynamic and micro is not None and not _splits(per_gpu, int(micro)):
            self.refuse(
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", micro,
                f"each GPU's share of a mini-batch is {per_gpu} samples, not a multiple of it (verl's "
                "prepare_micro_batches asserts it)",
                f"use a divisor of {per_gpu}, e.g. {_largest_divisor(per_gpu, int(micro))}",
            )
        elif not dynamic and micro is not None:
            micro_batches = per_gpu // int(micro)
        for section in ("rollout", "ref"):
            if section == "ref" and not _ref_worker(self.config):
                continue  # no reference model, or the actor computes it (LoRA) with the rollout's settings
            block = self.config.actor_rollout_ref[section]
            if _pass_dynamic(self.config, section):
                continue
            rows = _log_prob_rows(self.config, self.world, padded, section)
            key = f"actor_rollout_ref.{section}.log_prob_micro_batch_size_per_gpu"
            value = block.get("log_prob_micro_batch_size_per_gpu")
            if value is not None and not _splits(rows, int(value)):
                self.refuse(key, value, f"each GPU computes log-probs of {rows} samples, not a multiple of it "
                            "(verl's prepare_micro_batches asserts it)",
                            f"use a divisor of {rows}, e.g. {_largest_divisor(rows, int(value))}")
        if padded != int(self.config.data.train_batch_size) * n:
            self.notes.append(f"verl pads each training batch to {padded} samples (a multiple of lcm(dp, mini x n))")
        if micro_batches is not None:
            self.notes.append(f"{padded} samples per step, {micro_batches} micro-batch(es) of {micro} per GPU per update")
        if dynamic:
            self.notes.append(f"{padded} samples per step; dynamic batch sizes: verl packs each micro-batch up to its "
                              "token budget (no micro-batch divisibility)")

    def check_budgets(self) -> None:
        """Dynamic batch sizes' token budgets, as verl's workers read them (module docstring)."""
        actor_dynamic = bool(self.actor.use_dynamic_bsz)
        rollout_dynamic = bool(self.rollout.get("log_prob_use_dynamic_bsz", False))
        if actor_dynamic != rollout_dynamic:
            self.refuse(
                "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", rollout_dynamic,
                f"actor_rollout_ref.actor.use_dynamic_bsz is {actor_dynamic} (verl's ActorRolloutRefWorker.init_model "
                "asserts actor.use_dynamic_bsz == rollout.log_prob_use_dynamic_bsz)",
                f"set it to {str(actor_dynamic).lower()}, or leave it unset (it follows the actor's)",
            )
        budgets, ref_worker = [], _ref_worker(self.config)
        if actor_dynamic:
            # ActorRolloutRefWorker.init_model: `assert ...log_prob_max_token_len_per_gpu is not None` and
            # `assert ...ppo_max_token_len_per_gpu is not None` when actor.use_dynamic_bsz
            why = "verl's ActorRolloutRefWorker.init_model asserts it is set when actor.use_dynamic_bsz is true"
            budgets += [("actor", "ppo_max_token_len_per_gpu", _sp(self.actor), why, "each update micro-batch"),
                        ("rollout", "log_prob_max_token_len_per_gpu", _sp(self.actor), why,
                         "each log-prob micro-batch")]
        if ref_worker and _pass_dynamic(self.config, "ref"):
            ref = self.config.actor_rollout_ref.ref
            budgets.append(("ref", "log_prob_max_token_len_per_gpu", _sp(ref),
                            "the reference worker sizes its micro-batches by it (ref.log_prob_use_dynamic_bsz) and "
                            "verl's prepare_micro_batches fails on an unset one (None x sequence-parallel size)",
                            "each reference log-prob micro-batch"))
        if actor_dynamic and ref_worker and not _pass_dynamic(self.config, "ref"):
            ref = self.config.actor_rollout_ref.ref
            if ref.get("log_prob_micro_batch_size") is None and ref.get("log_prob_micro_batch_size_per_gpu") is None:
                # init_model builds the reference worker's ActorConfig from these; its __post_init__ asserts a
                # micro-batch size when use_dynamic_bsz is off (validate_config checks the ref block only when the
                # actor's use_dynamic_bsz is off too)
                self.refuse(
                    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", None,
                    "the reference worker computes its log-probs in fixed micro-batches (ref.log_prob_use_dynamic_bsz "
                    "is false) of no size: verl's ActorRolloutRefWorker.init_model builds its ActorConfig, which "
                    "asserts one is set",
                    "set it, or actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true with "
                    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
                )
        for section, name, sp, why, what in budgets:
            key = f"actor_rollout_ref.{section}.{name}"
            value = self.config.actor_rollout_ref[section].get(name)
            fits = math.ceil(self.length / sp)
            if value is None:
                self.refuse(key, value, why, f"set it to the tokens one GPU may hold in {what}, at least {fits} "
                            f"(prompt + response = {self.length} tokens" + (f" / Ulysses SP {sp}" if sp > 1 else "")
                            + ") to admit every sequence")
            elif int(value) < 1:
                self.refuse(key, value, "no sequence fits it (verl's rearrange_micro_batches asserts the budget x "
                            "the sequence-parallel size >= the longest sequence)", f"set it to at least {fits}")
            elif int(value) * sp < self.length:
                # not a refusal: rearrange_micro_batches compares the budget with the step's real (unpadded) lengths
                self.notes.append(
                    f"warning: {key}={value}" + (f" x Ulysses SP {sp} = {int(value) * sp}" if sp > 1 else "")
                    + f" tokens < prompt + response = {self.length}: verl's rearrange_micro_batches stops the run at "
                    f"the first step with a sequence over {int(value) * sp} tokens (it asserts the budget holds the "
                    f"longest real sequence); shorter steps train; {fits} admits every length")

    def check_kernels(self) -> None:
        """model.use_fused_kernels: the backend verl patches the forward for, and what its Triton kernel asserts."""
        model = self.config.actor_rollout_ref.model
        if not bool(model.get("use_fused_kernels", False)):
            return
        key = "actor_rollout_ref.model.fused_kernel_options.impl_backend"
        backend = (model.get("fused_kernel_options") or {}).get("impl_backend")
        if backend not in FUSED_BACKENDS:
            self.refuse(
                key, backend,
                "verl patches the model's forward for fused kernels only with torch, triton or liger "
                "(monkey_patch.py patch_forward_with_backends skips any other value), so the model returns logits "
                "and verl's engine reads output.log_probs, which it never set: the first log-prob pass fails",
                f"set it to one of {', '.join(FUSED_BACKENDS)}, or actor_rollout_ref.model.use_fused_kernels=false",
            )
            return
        if backend == "liger":
            self.notes.append("fused kernels: liger-kernel is installed, its LM head's memory is not estimated"
                              if _liger_installed() else "fused kernels: liger-kernel is not installed here, so verl's "
                              "FusedLinearForPPO runs (and the estimate counts) its torch kernel")
        if backend != "triton":
            return
        if str(self.config.trainer.get("device", "cuda")) == "cpu":
            self.refuse(key, backend, "verl's Triton kernel (kernels.py efficient_entropy_forward) asserts CUDA "
                        "tensors, and trainer.device is cpu", "use impl_backend=torch on CPU")
        elif self.arch is not None and self.arch.hidden_size % TRITON_HIDDEN_MULTIPLE:
            multiple = TRITON_HIDDEN_MULTIPLE
            self.refuse(key, backend,
                        f"the model's hidden size {self.arch.hidden_size} is not a multiple of {multiple} (verl's "
                        f"Triton kernel, kernels.py efficient_entropy_forward, asserts hidden_size % {multiple} == 0)",
                        "use impl_backend=torch")

    # ------------------------------------------------------------------ TransferQueue
    def check_storage(self) -> None:
        backend = self.config.get("transfer_queue", {}).get("backend", {})
        if backend.get("storage_backend", "SimpleStorage") != "SimpleStorage":
            return
        simple = backend.get("SimpleStorage", {})
        total = simple.get("total_storage_size")
        if total is None:
            return
        units = int(simple.get("num_data_storage_units", 1))
        load = storage_load(self.config, self.workdir)
        if load.validates and load.val_prompts is None:
            self.notes.append("validation batch unknown here (data.val_files not found, data.val_batch_size null): "
                              "TransferQueue capacity checked for the training batch only")
        per_unit = math.ceil(int(total) / units)
        if math.ceil(load.live / units) <= per_unit:
            self.notes.append(f"TransferQueue holds at most {load.live} of {total} samples")
            return
        val_n = int(self.rollout.val_kwargs.n)
        if load.val > load.train:
            # the most validation prompts per batch that fit beside the training batch
            room = (units * per_unit - (load.train if load.beside else 0)) // val_n
            self.refuse(
                "data.val_batch_size", self.config.data.get("val_batch_size"),
                f"validation puts {load.val_prompts} prompts x val_kwargs.n={val_n} = {load.val} samples into "
                f"TransferQueue" + (f" next to the {load.train}-sample training batch" if load.beside else "")
                + f" ({load.live} in all), over its capacity of {total} (transfer_queue.backend.SimpleStorage."
                "total_storage_size; TransferQueue refuses with 'Storage capacity exceeded')",
                f"validate in batches, data.val_batch_size={room} or fewer" if room >= 1
                else f"raise total_storage_size to {load.live}",
            )
        else:
            self.refuse(
                "transfer_queue.backend.SimpleStorage.total_storage_size", total,
                f"a step holds {load.live} samples in TransferQueue ({units} unit(s) of {per_unit}), more than it "
                "stores ('Storage capacity exceeded')",
                f"raise it to {load.live} or more",
            )

    # ------------------------------------------------------------------ lengths
    def check_lengths(self) -> None:
        mml = self.rollout.get("max_model_len")
        positions = None if self.arch is None else self.arch.max_position_embeddings
        key = "actor_rollout_ref.rollout.max_model_len"
        if mml is not None and positions is not None and int(mml) > positions:
            self.refuse(key, mml, f"above the model's max_position_embeddings={positions} (verl's vLLM server "
                        "refuses it at start)", f"set it to {min(positions, self.length)} or less")
            return
        effective = int(mml) if mml is not None else positions
        if effective is not None and effective < self.length:
            # verl runs this: its vLLM server's generate caps each response at max_model_len - prompt tokens (and
            # refuses a prompt that leaves no room). fgrpo-verl refuses it as its own policy: the runs compare
            # response budgets (data.max_response_length), and a silent per-prompt cut would change that budget
            # for the longer prompts only, with nothing in the logs to say so
            what = key if mml is not None else "the model's max_position_embeddings"
            prompt = int(self.config.data.max_prompt_length)
            room = effective - int(self.config.data.max_response_length)
            cut = "every response" if room <= 0 else f"the responses to prompts over {room} tokens"
            self.refuse(
                key, mml,
                f"prompt + response = data.max_prompt_length + data.max_response_length = {self.length} tokens does "
                f"not fit {what} ({effective}): verl would run and cut {cut} to {effective} - prompt tokens (its vLLM "
                "server's generate); fgrpo-verl's policy, not verl's, refuses it so that every sample gets the full "
                "response budget",
                (f"shorten data.max_response_length to {effective - prompt}" if effective > prompt else
                 f"data.max_prompt_length={prompt} alone fills {effective} tokens: shorten the prompts and the "
                 f"responses to {effective} tokens together")
                + (f" or raise {key} to {self.length}" if positions is None or positions >= self.length else ""),
            )

    # ------------------------------------------------------------------ memory
    def check_memory(self) -> None:
        if str(self.config.trainer.get("device", "cuda")) == "cpu":
            return
        gib = (self.config.get("slurm") or {}).get("gpu_memory_gib")
        if gib is None or self.arch is None:
            self.notes.append("memory not estimated (" + ("no slurm.gpu_memory_gib: select a cluster group"
                              if gib is None else "model architecture unknown here") + ")")
            return
        est = estimate_memory(self.config, self.arch, self.world)
        capacity = float(gib) * GIB
        util = float(self.rollout.gpu_memory_utilization)
        name = str(self.rollout.name)
        held = not bool(self.rollout.free_cache_engine)  # vLLM keeps its memory through the update
        dtype = str(self.actor.get("fsdp_config", {}).get("model_dtype") or "fp32")
        util_key = "actor_rollout_ref.rollout.gpu_memory_utilization"
        # the rollout phase binds (its resident states are the start's and more): the largest u that fits it
        headroom = math.floor(max(0.0, (capacity - est.states_rollout) / capacity) * 100) / 100
        lower = f"lower it to {headroom:.2f} or less, " if headroom > 0 else ""
        if name in VLLM_NAMES and est.states_start + est.vllm > capacity:
            self.refuse(
                util_key, util,
                f"vLLM starts (verl's LLMServerManager.create, after the actor's init_model) beside "
                f"{_gib(est.states_start)} GiB per GPU of {dtype} parameters (AdamW's moments are not allocated before "
                f"the first update) and asks for {_gib(est.vllm)} GiB free: {_gib(est.states_start + est.vllm)} GiB > "
                f"{gib} GiB (slurm.gpu_memory_gib); vLLM's request_memory refuses to start",
                f"{lower}use more GPUs, or set actor_rollout_ref.actor.fsdp_config.param_offload=true", estimate=True,
            )
        elif name in VLLM_NAMES and est.states_rollout + est.vllm > capacity:
            self.refuse(
                util_key, util,
                f"from the second step on, vLLM's {_gib(est.vllm)} GiB "
                + ("stay" if held else "wake (free_cache_engine)")
                + f" beside {_gib(est.states_rollout)} GiB per GPU of {dtype} parameters and AdamW moments (verl frees "
                f"the gradients when each update ends): {_gib(est.states_rollout + est.vllm)} GiB > {gib} GiB "
                "(slurm.gpu_memory_gib); the rollout runs out of GPU memory",
                f"{lower}use more GPUs, or set actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
                estimate=True,
            )
        tag = f"{_gib(est.states_train)} GiB FSDP states per GPU"
        training = est.states_train + est.activations + (est.vllm if held else 0.0)
        largest = est.largest
        if training > capacity:
            if largest is not None and est.activations >= est.states_train:  # the micro-batch is the larger term
                key, value, fix = largest.key, largest.value, largest.fix()
            else:
                key, value = "trainer.n_gpus_per_node", self.config.trainer.n_gpus_per_node
                # param/optimizer offload does not help here: verl moves them back to the GPU for the update
                fix = ("use more GPUs (trainer.nnodes / trainer.n_gpus_per_node), or FSDP2's CPU offload "
                       "(backend=gpu_fsdp2 with actor_rollout_ref.actor.fsdp_config.offload_policy=true)")
            self.refuse(key, value,
                        f"a training step needs at least {_gib(training)} GiB per GPU ({tag}: {dtype} parameters, "
                        f"gradients and AdamW moments, on the GPU for the update even with param/optimizer offload; "
                        f"{_gib(est.activations)} GiB for "
                        + (largest.describe() if largest is not None else "activations")
                        + (f"; vLLM's {_gib(est.vllm)} GiB, free_cache_engine=false" if held else "")
                        + f") > {gib} GiB (slurm.gpu_memory_gib)", fix, estimate=True)
        if name in VLLM_NAMES:
            tp = _parallel(self.rollout)[0]
            mml = int(self.rollout.get("max_model_len") or self.arch.max_position_embeddings)
            if est.kv_cache < est.kv_per_token * mml:
                self.refuse(
                    util_key, util,
                    f"vLLM's KV cache ({_gib(max(est.kv_cache, 0.0))} GiB after {_gib(est.vllm_weights)} GiB of weights) "
                    f"holds fewer than max_model_len={mml} tokens (vLLM refuses to start)",
                    f"set actor_rollout_ref.rollout.max_model_len={self.length} (prompt + response), "
                    + ("" if est.states_rollout + est.vllm > capacity else "raise gpu_memory_utilization, ")
                    + f"or raise TP above {tp}", estimate=True,
                )
            at_once = int(max(est.kv_cache, 0.0) // (est.kv_per_token * self.length))
            self.notes.append(
                f"memory >= {_gib(est.states_train + est.activations)} GiB training / "
                f"{_gib(est.states_rollout + est.vllm)} GiB rollout of {gib} GiB per GPU; KV cache holds "
                f"{min(at_once, int(self.rollout.max_num_seqs))} full-length sequences at once "
                f"(max_num_seqs={self.rollout.max_num_seqs})"
            )
        else:
            self.notes.append(f"memory >= {_gib(est.states_train + est.activations)} GiB training of {gib} GiB per GPU")

    def check_model(self) -> None:
        path = str(self.config.actor_rollout_ref.model.path)
        missing = missing_model(path, self.workdir)
        if missing is not None:
            self.refuse("actor_rollout_ref.model.path", path, *missing)


@dataclass(frozen=True)
class StorageLoad:
    """Samples a sync v1 step keeps in TransferQueue at once (module docstring)."""

    train: int  # B': the training batch after v1's upsampling
    val: int  # validation prompts per batch x val_kwargs.n (0 without validation)
    val_prompts: int | None  # None: neither data.val_batch_size nor the validation data is known here
    beside: bool  # validation runs while the training batch is held (trainer.test_freq > 0)
    validates: bool  # trainer.test_freq > 0 or trainer.val_before_train
    live: int


def storage_load(config, workdir: Path) -> StorageLoad:
    """The :class:`StorageLoad` of ``config`` (validation rows read from ``data.val_files`` under ``workdir``)."""
    _, train, _ = batch_layout(config, _world(config))
    trainer, data = config.trainer, config.data
    rows = _parquet_rows(data.get("val_files"), Path(workdir))
    batch = data.get("val_batch_size")
    prompts = rows if batch is None else (int(batch) if rows is None else min(int(batch), rows))
    beside = int(trainer.test_freq) > 0
    before = bool(trainer.get("val_before_train", True))
    val = (prompts or 0) * int(config.actor_rollout_ref.rollout.val_kwargs.n) if beside or before else 0
    live = max(train + (val if beside else 0), val if before else 0)
    return StorageLoad(train, val, prompts, beside, beside or before, live)


@dataclass(frozen=True)
class Pass:
    """One micro-batch of one of verl's passes over the model, on one GPU (module docstring: the memory estimate)."""

    name: str  # "update", "log-prob", "reference log-prob"
    key: str  # the setting that sizes its micro-batches
    value: object
    budget: bool  # sized by a token budget (dynamic batch sizes), else by samples
    tokens: int  # t: the micro-batch's tokens on one GPU (after Ulysses SP's split)
    head: str  # the LM head: "logits" (not fused), "torch", "triton", "liger" (installed)
    activations: float  # bytes

    def describe(self) -> str:
        packed = "packed to its token budget" if self.budget else "of full-length sequences"
        return f"one {self.name} micro-batch {packed} ({self.tokens} tokens per GPU)"

    def fix(self) -> str:
        also = (" (and rollout.log_prob_micro_batch_size_per_gpu)"
                if self.key == "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" else "")
        fused = ", or set actor_rollout_ref.model.use_fused_kernels=true" if self.head == "logits" else ""
        return f"lower it{also}" + ("" if self.budget else ", or shorten the sequences") + fused


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU (module docstring): the actor's FSDP states resident in each phase of verl's step, and the
    rest."""

    states_start: float  # when vLLM starts: fp32 parameters only
    states_rollout: float  # during a rollout after the first update: parameters and AdamW moments
    states_train: float  # during an update: parameters, gradients and AdamW moments
    activations: float  # the largest pass's
    vllm: float
    vllm_weights: float
    kv_cache: float
    kv_per_token: float
    passes: tuple[Pass, ...] = ()

    @property
    def largest(self) -> Pass | None:
        return max(self.passes, key=lambda p: p.activations, default=None)


def batch_layout(config, world: int) -> tuple[int, int, int]:
    """(dp, the training batch B' after v1's upsampling, samples of one mini-batch): dp = GPUs / the actor's Ulysses
    SP (``FSDPEngine.get_data_parallel_size``), B' a multiple of lcm(dp, mini x n)
    (``_get_required_batch_multiple``)."""
    n = int(config.actor_rollout_ref.rollout.n)
    dp = max(1, world // _sp(config.actor_rollout_ref.actor))
    mini = int(config.actor_rollout_ref.actor.ppo_mini_batch_size) * n
    batch = int(config.data.train_batch_size) * n
    multiple = math.lcm(dp, mini)
    return dp, math.ceil(batch / multiple) * multiple, mini


def _sp(block) -> int:
    """The Ulysses sequence-parallel size of an actor or reference block, as verl's ``FSDPActorConfig.__post_init__``
    sets its engine's: the block's own ``ulysses_sequence_parallel_size`` when > 1, else ``fsdp_config``'s."""
    legacy = int(block.get("ulysses_sequence_parallel_size", 1) or 1)
    if legacy > 1:
        return legacy
    return max(1, int((block.get("fsdp_config") or {}).get("ulysses_sequence_parallel_size", 1) or 1))


def _log_prob_rows(config, world: int, padded: int, section: str) -> int:
    """Samples one GPU computes log-probs of in a step: the padded batch over the data-parallel size of the worker
    that runs the pass (the actor's SP for the rollout block's pass, the reference's own for its worker)."""
    block = config.actor_rollout_ref.actor if section == "rollout" else config.actor_rollout_ref.ref
    return padded // max(1, world // _sp(block))


def _pass_dynamic(config, section: str) -> bool:
    """Whether a log-prob pass sizes its micro-batches by tokens: the actor's follows actor.use_dynamic_bsz (verl
    asserts rollout.log_prob_use_dynamic_bsz equals it), the reference worker's ref.log_prob_use_dynamic_bsz
    (``ActorRolloutRefWorker.init_model``)."""
    aro = config.actor_rollout_ref
    if section == "rollout":
        return bool(aro.actor.use_dynamic_bsz)
    return bool(aro.ref.get("log_prob_use_dynamic_bsz", False))


def lm_head(config) -> str:
    """How verl's engine computes the LM head's log-probs: "logits" (materialized, model.use_fused_kernels=false),
    or the fused kernel's backend: "torch", "triton", "liger" (only where liger-kernel is installed: verl's
    FusedLinearForPPO runs its torch kernel otherwise), or the unsupported backend as given (refused)."""
    model = config.actor_rollout_ref.model
    if not bool(model.get("use_fused_kernels", False)):
        return "logits"
    backend = (model.get("fused_kernel_options") or {}).get("impl_backend")
    if backend == "liger" and not _liger_installed():
        return "torch"
    return str(backend)


def head_bytes(head: str, tokens: int, vocab: int, train: bool, entropy: bool = False) -> float:
    """Bytes the LM head holds at its peak for ``tokens`` tokens on one GPU (module docstring: head)."""
    if head == "torch":
        per_element = (FUSED_TORCH_TRAIN_ENTROPY if entropy else FUSED_TORCH_TRAIN) if train else FUSED_TORCH_INFER
        return float(min(FUSED_CHUNK, tokens) * vocab * per_element)
    if head == "triton":
        forward = tokens * 3 * math.ceil(vocab / TRITON_VOCAB_SPLIT) * 4
        return float(max(forward, tokens * TRITON_DLOGITS_COLUMNS * ACT_BYTES) if train else forward)
    if head == "liger":
        return 0.0
    return float(tokens * ACT_BYTES * vocab * (2 if train else 1))  # bf16 logits (and their gradient)


def passes(config, arch: Architecture, world: int) -> tuple[Pass, ...]:
    """One micro-batch of each pass verl runs over the model in a step, on one GPU: the actor's update and log-prob
    passes, and the reference worker's log-prob pass where it runs (module docstring). A pass whose micro-batch
    size or budget is unset is left out (refused by :meth:`_Checks.check_budgets`)."""
    aro = config.actor_rollout_ref
    actor, rollout = aro.actor, aro.rollout
    length = int(config.data.max_prompt_length) + int(config.data.max_response_length)
    dp, padded, mini = batch_layout(config, world)
    head = lm_head(config)
    if head not in ("logits", *FUSED_BACKENDS):
        head = "logits"  # refused (check_kernels); estimated as materialized logits
    # the update's entropy is in the loss, with a gradient, when verl computes it (v1 _update_actor)
    entropy = bool(actor.get("calculate_entropy", False)) or float(actor.get("entropy_coeff", 0) or 0) != 0.0
    hidden = ACT_BYTES * arch.hidden_size * arch.num_hidden_layers
    found = []

    def add(name, section, dynamic, micro_name, budget_name, sp, rows, train):
        block = aro[section]
        name_key = budget_name if dynamic else micro_name
        value = block.get(name_key)
        if value is None or int(value) < 1:
            return
        # tokens of one micro-batch over its sequence-parallel group, then one GPU's share
        group = min(int(value) * sp, max(1, rows) * length) if dynamic else int(value) * length
        tokens = math.ceil(group / sp)
        act = head_bytes(head, tokens, arch.vocab_size, train, entropy) + (tokens * hidden if train else 0)
        found.append(Pass(name, f"actor_rollout_ref.{section}.{name_key}", value, dynamic, tokens, head, float(act)))

    sp = _sp(actor)
    add("update", "actor", bool(actor.use_dynamic_bsz), "ppo_micro_batch_size_per_gpu", "ppo_max_token_len_per_gpu",
        sp, mini // dp, True)
    # the actor's log-probs (and, with LoRA, the reference's: ref_in_actor runs them on the actor's settings)
    add("log-prob", "rollout", _pass_dynamic(config, "rollout"), "log_prob_micro_batch_size_per_gpu",
        "log_prob_max_token_len_per_gpu", sp, _log_prob_rows(config, world, padded, "rollout"), False)
    if _ref_worker(config):
        add("reference log-prob", "ref", _pass_dynamic(config, "ref"), "log_prob_micro_batch_size_per_gpu",
            "log_prob_max_token_len_per_gpu", _sp(aro.ref), _log_prob_rows(config, world, padded, "ref"), False)
    return tuple(found)


def fsdp_states(config, params: float, world: int) -> tuple[float, float, float]:
    """(start, rollout, update): bytes per GPU of the actor's FSDP states resident in each phase, as verl 0.9.1 runs
    them (``verl/workers/engine/fsdp/transformer_impl.py``, ``verl/workers/engine/base.py``,
    ``verl/workers/engine_workers.py``, ``verl/trainer/ppo/v1/trainer_base.py``):

    - start: ``PPOTrainer._setup`` (v1 ``trainer_base.py``) runs the actor's ``init_model`` and then
      ``LLMServerManager.create``, which starts vLLM. ``FSDPEngine.initialize`` has built the optimizer, but torch's
      AdamW allocates its moments at the first ``step()``, and no gradient exists: the fp32 parameters alone
      (none when ``param_offload``: ``initialize`` moves them to the host).
    - rollout, from the second step on: ``EngineTrainModeCtx.__exit__`` calls ``optimizer_zero_grad``
      (``Optimizer.zero_grad``: ``set_to_none=True``), so gradients are freed when each update ends; parameters and
      moments stay. ``BaseEngineCtx.__exit__`` moves the optimizer to the host under ``optimizer_offload``, and
      ``ActorRolloutRefWorker.update_weights`` the parameters under ``param_offload``, before the KV cache wakes.
    - update: ``BaseEngineCtx.__enter__`` (train mode) loads offloaded parameters, gradients and optimizer back
      onto the GPU, so offload does not lower this phase's peak.

    FSDP2's ``offload_policy`` (``CPUOffloadPolicy``, read only with strategy fsdp2) keeps all of them on the host in
    every phase.

    The bytes follow ``fsdp_config.model_dtype`` (``FSDPEngine._build_module`` loads the weights in it; fp32 by
    default): gradients and torch's AdamW moments take the parameters' dtype. With LoRA (``model.lora_rank > 0``) the
    base weights are frozen: no gradients or moments for them (the adapters' are not counted)."""
    actor = config.actor_rollout_ref.actor
    fsdp = actor.get("fsdp_config", {})
    if str(actor.get("strategy", "fsdp")) == "fsdp2" and bool(fsdp.get("offload_policy", False)):
        return 0.0, 0.0, 0.0
    scale = DTYPE_BYTES.get(str(fsdp.get("model_dtype") or "fp32"), PARAM_BYTES) / PARAM_BYTES
    trained = 0.0 if int(config.actor_rollout_ref.model.get("lora_rank", 0) or 0) > 0 else 1.0
    param_here = 0 if fsdp.get("param_offload", False) else PARAM_BYTES * scale
    moments_here = 0 if fsdp.get("optimizer_offload", False) else OPTIMIZER_BYTES * scale * trained
    per_gpu = params / world
    return (per_gpu * param_here, per_gpu * (param_here + moments_here),
            per_gpu * scale * (PARAM_BYTES + (GRAD_BYTES + OPTIMIZER_BYTES) * trained))


def estimate_memory(config, arch: Architecture, world: int) -> MemoryEstimate:
    """The per-GPU memory estimate of the module docstring for ``config`` on ``world`` GPUs."""
    rollout = config.actor_rollout_ref.rollout
    start, during_rollout, update = fsdp_states(config, arch.params, world)
    found = passes(config, arch, world)
    capacity = float((config.get("slurm") or {}).get("gpu_memory_gib", 0)) * GIB
    vllm = float(rollout.gpu_memory_utilization) * capacity
    tp = int(rollout.tensor_model_parallel_size)
    weights = ACT_BYTES * arch.params / tp
    kv_per_token = 2 * arch.num_hidden_layers * math.ceil(arch.num_key_value_heads / tp) * arch.head_dim * ACT_BYTES
    return MemoryEstimate(start, during_rollout, update, max((p.activations for p in found), default=0.0), vllm,
                          weights, vllm - weights, float(kv_per_token), found)


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f}"


def _splits(rows: int, micro: int) -> bool:
    """Whether verl's own ``prepare_micro_batches`` splits ``rows`` samples into micro-batches of ``micro``."""
    import torch
    from verl.utils import tensordict_utils as tu

    if micro < 1:
        return False
    batch = tu.get_tensordict({"probe": torch.zeros(rows, 1)},
                              non_tensor_dict={"use_dynamic_bsz": False, "micro_batch_size_per_gpu": micro})
    try:
        _engine_utils().prepare_micro_batches(batch)
    except AssertionError:
        return False
    return True


_ENGINE_UTILS = None


def _engine_utils():
    """verl's ``verl/workers/engine/utils.py``, loaded on its own: importing it as ``verl.workers.engine.utils`` runs
    the engine package's ``__init__``, which imports every training engine (a warning for each one missing) and
    resolves verl's accelerator platform in the launcher's process. The module itself needs neither."""
    global _ENGINE_UTILS
    if _ENGINE_UTILS is None:
        import importlib.util

        import verl

        path = Path(verl.__path__[0]) / "workers" / "engine" / "utils.py"
        spec = importlib.util.spec_from_file_location("_fgrpo_verl_engine_utils", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _ENGINE_UTILS = module
    return _ENGINE_UTILS


def _tp_fits_heads(tp: int, heads: int, kv_heads: int) -> bool:
    """Whether vLLM shards attention over ``tp``: the attention heads split, and the KV heads split (at least tp of
    them) or replicate evenly (fewer)."""
    return heads % tp == 0 and (kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0)


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in _divisors(n) if d <= max(1, at_most))


def _ref_in_actor(config) -> bool:
    """verl's v1 ``PPOTrainer._setup``: with LoRA (``model.lora.rank``, else ``model.lora_rank``, > 0, or a
    ``model.lora_adapter_path``) the actor computes the reference log-probs (its base weights, the adapter off)."""
    model = config.actor_rollout_ref.model
    rank = int((model.get("lora") or {}).get("rank", 0) or 0)
    if rank <= 0:
        rank = int(model.get("lora_rank", 0) or 0)
    return rank > 0 or model.get("lora_adapter_path") is not None


def _ref_worker(config) -> bool:
    """Whether a reference model runs beside the actor, with the ref block's log-prob settings: verl needs a
    reference policy (``need_reference_policy``: use_kl_loss or use_kl_in_reward) and LoRA does not put it in the
    actor (``_setup``: ``self.use_reference_policy and not self.ref_in_actor``)."""
    from verl.trainer.ppo.utils import need_reference_policy

    return bool(need_reference_policy(config)) and not _ref_in_actor(config)


def _liger_installed() -> bool:
    """Whether verl's FusedLinearForPPO finds liger-kernel's function here (it falls back to its torch kernel
    otherwise: ``_LIGER_FUSED_LINEAR_SCALED_CROSS_ENTROPY is None``)."""
    from verl.utils.experimental import torch_functional

    return torch_functional._LIGER_FUSED_LINEAR_SCALED_CROSS_ENTROPY is not None


def _parquet_rows(files, workdir: Path) -> int | None:
    from fgrpo_verl.launch.steps import parquet_rows

    return parquet_rows(files, workdir)


_PROBE = None


# check_rollout's verdicts (refusals, notes) by everything _check_rollout reads
_ROLLOUT_VERDICTS: dict[tuple, tuple[tuple, tuple]] = {}


def _replica_probe():
    """A ``RolloutReplica`` that launches nothing: constructing it runs verl's own ``__init__`` checks."""
    global _PROBE
    if _PROBE is None:
        from verl.workers.rollout.replica import RolloutReplica

        class _Probe(RolloutReplica):
            async def launch_servers(self):  # pragma: no cover - never launched
                raise NotImplementedError

        _PROBE = _Probe
    return _PROBE


def run(config, workdir: Path, require_model: bool = False, env=None) -> Report:
    """Every check above on the composed ``config`` (relative data paths from ``workdir``); ``require_model``: the
    model must be loadable offline here (a submit, a job start); ``env``: the job's environment (default: this
    process's). Raises :class:`PreflightError`; with ``FGRPO_PREFLIGHT_MEMORY=warn`` in ``env`` the estimate refusals
    become notes (:meth:`Refusal.bypassed`) and only the certain ones raise."""
    checks = _Checks(config, workdir, env)
    mode = checks.memory_mode()
    checks.check_rollout()
    checks.check_batches()
    checks.check_budgets()
    checks.check_kernels()
    checks.check_storage()
    checks.check_lengths()
    checks.check_memory()
    if require_model:
        checks.check_model()
    refusals, notes = checks.refusals, checks.notes
    if mode == "warn":
        notes = [r.bypassed() for r in refusals if r.estimate] + notes
        refusals = [r for r in refusals if not r.estimate]
    if refusals:
        raise PreflightError(refusals)
    return Report(tuple(notes))


def check_run(config, workdir: str, require_model: bool = False, env: dict | None = None) -> tuple[str, str]:
    """What ``fgrpo-verl launch`` checks of one run with verl: ``validate_config``
    (fgrpo_verl.integration.validation.validate), then :func:`run`, with ``env`` (the recipe's ``env:``) over this
    process's environment. ``("ok", the report's summary)``, ``("invalid", verl's or fgrpo's message)`` or
    ``("refused", one line per refusal)``. The launcher runs it in the process that imports verl beside it
    (fgrpo_verl.launch.validator), so everything here must be picklable both ways."""
    import os

    from fgrpo_verl.integration.validation import verdict

    error = verdict(config)
    if error is not None:
        return "invalid", error
    try:
        report = run(config, Path(workdir), require_model=require_model, env={**os.environ, **(env or {})})
        return "ok", report.summary()
    except PreflightError as exc:
        return "refused", str(exc)
