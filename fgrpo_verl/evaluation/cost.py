"""GPU-hours of evaluating a run's checkpoints, printed by ``fgrpo-verl launch --dry-run`` for each protocol.

One evaluation pass over benchmarks B with n samples per problem generates about

    tokens = n x sum_b P_b x L,        L = mean_response_fraction x max_new_tokens

and takes ``tokens / R`` GPU-seconds, with R the decode throughput of one GPU for a model of p parameters,

    R(p) = tokens_per_gpu_second_7b x 7.62e9 / p          (throughput ~ inverse model size at equal memory)

What comes from the configs: P_b (the benchmark files' problem counts, or the published sizes in
:data:`KNOWN_PROBLEMS` when a file is not on this machine), n and the benchmarks of each pass (the recipe's
``evaluation`` block), max_new_tokens and p (the base model, fgrpo_verl/evaluation/model_presets.py), and the
number of checkpoints C (one per epoch: total steps / save_freq). What is assumed, and printed with every
estimate (override both in the recipe, ``evaluation.cost``): L = 1/4 of the cap, R = 5,000 tokens/s for a 7.6B
model on one H100 with vLLM (no measurement here: no GPU on the build machine).

    protocol "select" (default)   C x selection pass (math benchmarks, small n)  +  1 x final pass (all, n = 1024)
    protocol "full"               C x final pass
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ConfigDict, Field

from fgrpo_verl.evaluation.shapes import Shape

REFERENCE_PARAMS = 7.62e9  # Qwen2.5-7B
# Published problem counts of the paper's benchmarks (the public copies fgrpo-verl prepare-benchmarks fetches). Used
# only when a benchmark file is not on this machine; SynLogic's subset size is not known here, so it is left out of
# an estimate (and the estimate says so) until its file exists.
KNOWN_PROBLEMS = {"MATH500": 500, "AIME24": 30, "AIME25": 30, "AMC23": 40, "Minerva": 272, "Olympiad": 675,
                  "GPQA": 198, "IFEval": 541}


class CostAssumptions(Shape):
    """What an estimate assumes (a recipe's ``evaluation.cost``; errors name the key: shapes.py)."""

    model_config = ConfigDict(frozen=True)
    tokens_per_gpu_second_7b: float = Field(5000.0, gt=0)
    mean_response_fraction: float = Field(0.25, gt=0, le=1)
    # training's sustained FLOP/s per GPU (fgrpo_verl/launch/summary.py): ~40 % of an H100's dense bf16 peak
    training_flops_per_gpu_second: float = Field(4e14, gt=0)

    def describe(self) -> str:
        return (f"assumed: mean response = {self.mean_response_fraction:g} x max_new_tokens, decode throughput "
                f"{self.tokens_per_gpu_second_7b:,.0f} tokens/s per GPU at 7.62B parameters, scaled by 7.62B / size")


def pass_gpu_hours(problems: int, n: int, max_new_tokens: int, params: float, assumptions: CostAssumptions) -> float:
    """GPU-hours of one pass: n samples of each of ``problems`` problems (module docstring)."""
    tokens = float(n) * problems * assumptions.mean_response_fraction * max_new_tokens
    rate = assumptions.tokens_per_gpu_second_7b * REFERENCE_PARAMS / params
    return tokens / rate / 3600.0


@dataclass(frozen=True)
class PassPlan:
    name: str            # "selection" or "final"
    n: int
    problems: int        # problems counted (files or published sizes)
    uncounted: tuple[str, ...]  # benchmarks whose size is unknown here: left out of the estimate
    checkpoints: int     # checkpoints this pass evaluates


def protocol_hours(passes: list[PassPlan], max_new_tokens: int, params: float, a: CostAssumptions) -> float:
    return sum(p.checkpoints * pass_gpu_hours(p.problems, p.n, max_new_tokens, params, a) for p in passes)
