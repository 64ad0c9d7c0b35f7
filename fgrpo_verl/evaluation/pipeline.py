"""``fgrpo-verl eval`` end to end: generate (or load) -> score -> pass@k tables, plots, significance.

    1. generations: for every --model and --bench, sample n completions per problem (generate.py) and append
       them to ``<out>/generations.jsonl``; or read ``--from-generations`` files.
    2. scoring: lines without per-sample ``correct`` (or all, with --rescore) are scored with the benchmark's
       scorer (scorers.py).
    3. report: per (run, benchmark) mean unbiased pass@k for k = 1, 2, 4, ... (report.py), written as the paper's
       Tables 12-14 layout and pass@k curves; optional paired subsampling tests (significance.py).
"""

from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

from fgrpo_verl.evaluation.formats import GenerationRecord, load_benchmark, read_generations, write_generations
from fgrpo_verl.evaluation.pass_at_k import ks_up_to
from fgrpo_verl.evaluation.report import collect_scores, markdown_table, plot_curves, table_rows, write_tables
from fgrpo_verl.evaluation.scorers import is_correct, resolve_scorer
from fgrpo_verl.evaluation.significance import paired_subsampling_test


def parse_pairs(option: str, values, allow_empty: bool = False) -> dict[str, str]:
    """``["A=x", "B=y"]`` -> ``{"A": "x", "B": "y"}``; names unique and non-empty."""
    out: dict[str, str] = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or (not value and not allow_empty):
            raise ValueError(f"{option} expects NAME=VALUE, got {item!r}")
        if name in out:
            raise ValueError(f"{option}: name {name!r} given twice")
        out[name] = value
    return out


@functools.lru_cache(maxsize=None)
def _scorer(spec: str):
    return resolve_scorer(spec)


def _score_texts(job: tuple[str, float, dict, list[str]]) -> list[int]:
    """Score one problem's completions (module-level so worker processes can run it)."""
    spec, threshold, ref, texts = job
    fn = _scorer(spec)
    return [int(is_correct(fn, text, ref, threshold)) for text in texts]


def score_records(records: list[GenerationRecord], benchmarks: dict[str, list[dict]], scorer_spec_for,
                  threshold: float, rescore: bool = False, workers: int = 1) -> None:
    """Fill ``rec.correct`` from ``rec.completions`` where missing (or always with ``rescore``), in place.

    ``scorer_spec_for(benchmark)`` names the scorer (built-in or ``module:function``). With ``workers > 1`` the
    problems are scored in that many forked processes (math-verify costs milliseconds per completion, i.e.
    minutes per run at n = 1024); the scorer is resolved inside each worker."""
    import numpy as np

    _scorer.cache_clear()  # a module:function may have been replaced since the last call
    by_id = {name: {r["id"]: r for r in recs} for name, recs in benchmarks.items()}
    todo, jobs = [], []
    for rec in records:
        if rec.correct is not None and not rescore:
            continue
        if rec.completions is None:
            raise ValueError(f"{rec.key}: --rescore needs 'completions' but the line only has 'correct'")
        if rec.answer is not None:
            ref = {"answer": rec.answer, "data_source": rec.data_source or rec.benchmark, **rec.extra}
        else:
            bench = by_id.get(rec.benchmark)
            if bench is None or rec.problem_id not in bench:
                raise ValueError(
                    f"{rec.key}: the line has completions but no 'answer'; pass the benchmark file with "
                    f"--bench {rec.benchmark}=FILE holding id {rec.problem_id!r}"
                )
            ref = bench[rec.problem_id]
        spec = scorer_spec_for(rec.benchmark)
        _scorer(spec)  # resolve once here so a bad spec fails before any worker starts
        todo.append(rec)
        jobs.append((spec, threshold, ref, rec.completions))
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1 or len(jobs) < 2:
        results = [_score_texts(job) for job in jobs]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        # fork: workers inherit already-imported scorer modules; they never touch CUDA
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("fork")) as pool:
            results = list(pool.map(_score_texts, jobs, chunksize=max(1, len(jobs) // (4 * workers))))
    for rec, result in zip(todo, results):
        rec.correct = np.array(result, dtype=np.int8)


def generate_records(models: dict[str, str], benchmarks: dict[str, list[dict]], args, out_path: Path, scorer_spec_for,
                     log=print) -> list[GenerationRecord]:
    """Sample ``args.n`` completions per problem for every model x benchmark, score, append to ``out_path``."""
    from fgrpo_verl.evaluation.generate import build_prompt, make_sampler, resolve_model_path

    template_kwargs = json.loads(args.chat_template_kwargs) if args.chat_template_kwargs else None
    if template_kwargs is not None and not isinstance(template_kwargs, dict):
        raise ValueError(f"--chat-template-kwargs must be a JSON object, got {args.chat_template_kwargs!r}")
    records: list[GenerationRecord] = []
    out_path.write_text("", encoding="utf-8")
    for run, model_path in models.items():
        sampler = make_sampler(args.backend, resolve_model_path(model_path), args)
        for bench, problems in benchmarks.items():
            prompts = [build_prompt(p, sampler.tokenizer, args.system_prompt, args.prompt_style, template_kwargs) for p in problems]
            log(f"[eval] {run} on {bench}: {len(prompts)} problems x n={args.n} ({args.backend})")
            texts = sampler.sample(prompts, n=args.n, temperature=args.temperature, top_p=args.top_p,
                                   max_new_tokens=args.max_new_tokens, seed=args.seed)
            batch = [
                GenerationRecord(run=run, benchmark=bench, problem_id=p["id"], completions=t, answer=p["answer"],
                                 data_source=p["data_source"], prompt=prompt)
                for p, prompt, t in zip(problems, prompts, texts)
            ]
            score_records(batch, benchmarks, scorer_spec_for, args.threshold, workers=args.score_workers)
            write_generations(out_path, batch, with_completions=args.save_completions, append=True)
            records.extend(batch)
        del sampler
    return records


def significance_report(scores, pairs: list[tuple[str, str]], benchmarks: list[str], args, out_dir: Path):
    """Run the paired subsampling test per (baseline, focal) pair and benchmark; write CSV + markdown.

    Returns marks for the main table: a "*" after the focal cell where the difference is significant."""
    marks: dict[tuple[str, str, int], str] = {}
    rows = []
    for baseline, focal in pairs:
        for bench in benchmarks:
            a, b = scores.get((baseline, bench)), scores.get((focal, bench))
            if a is None or b is None:
                raise ValueError(f"--significance {baseline}:{focal}: no scores for benchmark {bench!r} in both runs")
            if a.problem_ids != b.problem_ids:
                raise ValueError(
                    f"--significance {baseline}:{focal} on {bench!r}: the runs cover different problems "
                    f"({len(a.problem_ids)} vs {len(b.problem_ids)} ids); the paired test needs the same problem set"
                )
            ks = [k for k in ks_up_to(args.significance_m, args.k_max)]
            for r in paired_subsampling_test(a.n, a.c, b.n, b.c, ks=ks, m=args.significance_m,
                                             iterations=args.significance_iterations, alpha=args.alpha,
                                             seed=args.seed):
                rows.append(dict(baseline=baseline, focal=focal, benchmark=bench, m=args.significance_m,
                                 iterations=args.significance_iterations, **r.as_dict()))
                if r.significant:
                    marks[(focal, bench, r.k)] = "*"
    path = out_dir / "significance.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"Paired m-out-of-n subsampling (m={args.significance_m}, {args.significance_iterations} iterations, "
             f"two-sided alpha={args.alpha}); difference = focal - baseline, pass@k in points (%).", "",
             "| baseline | focal | benchmark | k | baseline | focal | diff | CI low | CI high | p | significant |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['baseline']} | {r['focal']} | {r['benchmark']} | {r['k']} | {100 * r['baseline_pass_at_k']:.2f} | "
            f"{100 * r['focal_pass_at_k']:.2f} | {100 * r['difference']:+.2f} | {100 * r['ci_low']:+.2f} | "
            f"{100 * r['ci_high']:+.2f} | {r['p_value']:.4f} | {'yes' if r['significant'] else 'no'} |")
    (out_dir / "significance.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return marks, rows


def run_eval(args, log=print) -> int:
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    models = parse_pairs("--model", args.model)
    bench_files = parse_pairs("--bench", args.bench)
    bench_scorers = parse_pairs("--bench-scorer", args.bench_scorer)
    averages = {name: [b.strip() for b in members.split(",") if b.strip()]
                for name, members in parse_pairs("--average", args.average).items()}
    if args.from_generations and models:
        raise ValueError("give either --from-generations (score saved generations) or --model (generate), not both")
    if not args.from_generations and not models:
        raise ValueError("nothing to evaluate: give --model NAME=PATH with --bench NAME=FILE, or --from-generations FILE")
    if models and not bench_files:
        raise ValueError("--model needs at least one --bench NAME=FILE")
    unknown = sorted(set(bench_scorers) - set(bench_files)) if not args.from_generations else []
    if unknown:
        raise ValueError(f"--bench-scorer names benchmarks not given with --bench: {unknown}")

    benchmarks = {name: load_benchmark(path, name) for name, path in bench_files.items()}

    def scorer_spec_for(bench: str) -> str:
        return bench_scorers.get(bench, args.scorer)

    if models:
        records = generate_records(models, benchmarks, args, out_dir / "generations.jsonl", scorer_spec_for, log)
    else:
        records = [rec for path in args.from_generations for rec in read_generations(path)]
        keys = [r.key for r in records]
        if len(set(keys)) != len(keys):
            raise ValueError("the --from-generations files repeat a (run, benchmark, problem_id); merge samples of a problem into one line")
        score_records(records, benchmarks, scorer_spec_for, args.threshold, rescore=args.rescore,
                      workers=args.score_workers)

    scores = collect_scores(records)
    runs = list(dict.fromkeys(r.run for r in records))
    columns = list(dict.fromkeys(r.benchmark for r in records))
    if args.runs:
        order = [r.strip() for r in args.runs.split(",") if r.strip()]
        missing = sorted(set(order) - set(runs))
        if missing:
            raise ValueError(f"--runs names runs that are not in the generations: {missing}; available: {runs}")
        runs = order
    for name, members in averages.items():
        missing = sorted(set(members) - set(columns))
        if missing or not members:
            raise ValueError(f"--average {name!r} lists benchmarks {missing or members} not among {columns}")
    max_n = max(int(s.n.max()) for s in scores.values())
    ks = ks_up_to(max_n, args.k_max)
    rows = table_rows(scores, runs, columns, ks, averages)
    all_columns = columns + list(averages)

    marks = {}
    if args.significance:
        pairs = []
        for spec in args.significance:
            base, sep, focal = spec.partition(":")
            if not sep or base not in runs or focal not in runs or base == focal:
                raise ValueError(f"--significance expects BASELINE:FOCAL with two different runs among {runs}, got {spec!r}")
            pairs.append((base, focal))
        marks, _ = significance_report(scores, pairs, columns, args, out_dir)

    paths = write_tables(out_dir, rows, runs, all_columns, ks, marks)
    if not args.no_plots:
        plot_curves(out_dir / "plots", rows, runs, all_columns, ks)
    log(markdown_table(rows, runs, all_columns, ks, marks))
    if marks:
        log("'*' marks a focal cell whose paired difference to the baseline is significant (significance.md).")
    log(f"[eval] wrote {paths['markdown']}, {paths['wide_csv']}, {paths['long_csv']}" +
        ("" if args.no_plots else f", {out_dir / 'plots'}/*.png"))
    return 0
