"""Host memory of an evaluation job (sbatch --mem, per node), from the parameter count P of the run's model and the
number W of FSDP ranks whose shards make up a checkpoint (trainer.nnodes x trainer.n_gpus_per_node).

The job first merges each checkpoint it evaluates with verl's model merger, one at a time, before any worker
starts. The merger holds the most: it loads every rank's fp32 shard (4 B/param in all) and keeps them until each
tensor has its bf16 copy (2 B/param), with rank 0's shard loaded a second time and held to the end (4/W B/param);
it then saves from the bf16 tensors and an empty bf16 model (4 B/param + 4/W), less. Then the workers evaluate:
gpus_per_node / tensor_parallel_size vLLM engines, each a process with its own CUDA context, engine core and
tokenizer on the host, VLLM_WORKER_HOST_GIB each (an allowance, not a measurement: no GPU measured it here); they
stream bf16 weights to the GPUs. The two phases never overlap, so the job asks for the larger, plus a fixed
allowance for the interpreter, torch and the tokenizer:

    mem = max((6 + 4/W) x P B, E x 8 GiB) + 4 GiB, rounded up to whole GiB     (7.62B, W = 16, E = 8: 68 GiB)

Without it a site's default memory per job (often a few GB) kills the merger. A recipe's evaluation.resources.mem
replaces it; a memory option in evaluation.resources.extra (--mem-per-gpu, --mem-per-cpu: sbatch refuses them beside
--mem) leaves it out.
"""

from __future__ import annotations

import math

from fgrpo_verl.launch.eval_spec import EvalSpec
from fgrpo_verl.launch.recipe import MEMORY_OPTIONS

MERGE_BYTES_PER_PARAM = 6
EVAL_MEM_ALLOWANCE_GIB = 4
VLLM_WORKER_HOST_GIB = 8


def eval_host_memory(params: float, world_size: int, engines: int = 0) -> str:
    """sbatch --mem of an evaluation job of a ``params``-parameter model trained on ``world_size`` ranks, evaluated
    by ``engines`` vLLM engines (above)."""
    merge = (MERGE_BYTES_PER_PARAM + 4 / max(1, world_size)) * params / 2**30
    return f"{math.ceil(max(merge, engines * VLLM_WORKER_HOST_GIB) + EVAL_MEM_ALLOWANCE_GIB)}G"


def eval_memory(spec: EvalSpec, config, params: float | None) -> tuple[str | None, str]:
    """(sbatch --mem of the run's evaluation jobs or None, the dry run's line saying where it comes from)."""
    # Resources refuses a --mem beside another memory option (sbatch takes one)
    given = [o for o in spec.resources.extra if o.partition("=")[0] in MEMORY_OPTIONS]
    if spec.resources.mem is not None:
        return spec.resources.mem, f"eval job memory: --mem={spec.resources.mem} (evaluation.resources.mem)"
    if given:
        return None, f"eval job memory: {given[0]} (evaluation.resources.extra; no --mem beside it)"
    model = str(config.actor_rollout_ref.model.path)
    if params is None:
        return None, (f"eval job memory: no --mem (parameter count of {model} not known here): the site's default "
                      "per job, which may be too small for verl's model merger; set evaluation.resources.mem")
    world = int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)
    # vLLM engines on GPUs; the CPU back-end's workers hold the model in the same host memory the merge needed
    engines = spec.gpus_per_node // spec.engine.tensor_parallel_size if spec.backend == "vllm" else 0
    mem = eval_host_memory(params, world, engines)
    return mem, (f"eval job memory: --mem={mem} = the larger of verl's model merger, ({MERGE_BYTES_PER_PARAM} + "
                 f"4/{world}) B x {params / 1e9:.2f}B params, and (after it) {engines} vLLM engine(s) x "
                 f"{VLLM_WORKER_HOST_GIB} GiB, + {EVAL_MEM_ALLOWANCE_GIB} GiB (evaluation.resources.mem overrides)")
