"""``fgrpo-verl eval`` end to end: generate (or load) -> score -> pass@k tables, plots, significance.

    1. generations (``--model``): per run, benchmark and chunk of ``--problems-per-call`` problems, sample n
       completions per problem (generate.py; one seeded request per sample block), append each problem's
       completions to ``<out>/generations.jsonl`` (flushed per problem), then score them and append a correctness
       line per problem. ``--resume`` continues a killed run: a torn last line is cut off, problems with
       completions but no correctness line are scored, the rest are generated. Without ``--resume`` an existing
       ``generations.jsonl`` is never touched: the run refuses; so does a second eval while one writes ``<out>``
       (``exclusive_out``).
    2. counting: the generation files are read line by line into per-problem (n, c, scorer errors)
       (scoring.count_correct); the same code reads a fresh run, a resumed one and ``--from-generations``.
    3. report: per (run, benchmark) mean unbiased pass@k for k = 1, 2, 4, ... (report.py), runs checked to cover the
       same problems, written as the paper's Tables 12-14 layout and curves; optional paired subsampling tests of
       benchmarks and ``--average`` columns (significance.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from fgrpo_verl.evaluation.formats import (
    GenerationRecord, LineIndex, append_lines, drop_torn_tail, iter_generation_lines, load_benchmark,
)
from fgrpo_verl.evaluation.generate import Request, blocks, make_sampler, request_seed, resolve_model_path
from fgrpo_verl.evaluation.prompts import benchmark_group, encode_prompt, prompt_setting
from fgrpo_verl.evaluation.report import (
    check_same_problems, markdown_table, plot_curves, table_rows, write_csv, write_tables,
)
from fgrpo_verl.evaluation.scorers import resolve_scorer
from fgrpo_verl.evaluation.scoring import SCORE_CHUNK, Scorer, count_correct
from fgrpo_verl.evaluation.significance import paired_tests
from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.pass_at_k import ks_up_to

GENERATIONS = "generations.jsonl"
MANIFEST = "eval_manifest.json"
LOCK = "eval-writer.lock"
# Settings that decide which samples are drawn and how they are scored: a resumed run must match them.
SAMPLING_KEYS = ("backend", "n", "temperature", "top_p", "max_new_tokens", "seed", "samples_per_request",
                 "prompt_preset", "system_prompt", "chat_template_kwargs", "prompt_style", "bench_group",
                 "save_completions", "scorer", "bench_scorer", "threshold", "batch_size")


def parse_pairs(option: str, values) -> dict[str, str]:
    """``["A=x", "B=y"]`` -> ``{"A": "x", "B": "y"}``; names unique and non-empty."""
    out: dict[str, str] = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ValueError(f"{option} expects NAME=VALUE, got {item!r}")
        if name in out:
            raise ValueError(f"{option}: name {name!r} given twice")
        out[name] = value
    return out


def file_sha256(path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _manifest(args, models: dict, bench_files: dict) -> dict:
    settings = {key: getattr(args, key) for key in SAMPLING_KEYS}
    # benchmark contents too: a file edited in place (a fixed reference answer, other problems) must not mix with
    # the lines already scored against the old one. Model weights are too large to hash: their paths only.
    return {"settings": settings, "models": {k: str(Path(v).resolve()) for k, v in models.items()},
            "benchmarks": {k: str(Path(v).resolve()) for k, v in bench_files.items()},
            "benchmark_sha256": {k: file_sha256(v) for k, v in bench_files.items()}}


@contextlib.contextmanager
def exclusive_out(out_dir: Path):
    """Hold ``<out>/eval-writer.lock`` while this process writes ``<out>``: a second ``eval --model`` into it (a
    duplicate job, a --resume started while the first still runs) would append the same problems again and could cut
    the first one's line in flight as a "torn tail"; it is refused at once instead.

    filelock's ``FileLock``: ``flock``, which the kernel releases when its holder dies, so nothing goes stale. Where
    flock answers ENOSYS (Lustre mounted ``noflock``), the library falls back by itself to a marker file naming the
    holder's pid, host and start time, and takes over one whose holder is gone from this host; one left by a holder
    on a node that died cannot be judged from here, so the refusal names it. (filelock's lease, a marker its holder
    refreshes, could judge that too, but only by watching it for a whole lease: no refusal at once.)"""
    from filelock import FileLock, Timeout

    lock = FileLock(out_dir / LOCK)
    try:
        held = lock.acquire(timeout=0)
    except Timeout:
        pid = getattr(lock, "pid", None)  # recorded only by the marker file (no flock)
        holder = f", pid {pid} by {lock.lock_file}: if that process is gone (its node failed), remove the file" \
            if pid else ""
        raise ValueError(f"another `fgrpo-verl eval` is writing to {out_dir}{holder}; wait for it to finish or stop "
                         "it, then --resume; nothing was touched") from None
    with held:
        yield


def prepare_out(out_dir: Path, args, models: dict, bench_files: dict, log) -> None:
    """Refuse to overwrite earlier samples; on ``--resume`` check the settings match and cut a torn last line."""
    gen_path, man_path = out_dir / GENERATIONS, out_dir / MANIFEST
    current = _manifest(args, models, bench_files)
    existing = gen_path.is_file() and gen_path.stat().st_size > 0
    if not args.resume:
        if existing or man_path.is_file():
            raise ValueError(f"{out_dir} already holds an evaluation ({GENERATIONS} / {MANIFEST}); pass --resume to "
                             "continue it, or choose a new --out (nothing was overwritten)")
    elif man_path.is_file():
        before = ck.read_json(man_path)
        diffs = [f"{key}: {before['settings'].get(key)!r} then, {value!r} now"
                 for key, value in current["settings"].items() if before["settings"].get(key) != value]
        changed = "{0} then, {1} now"
        for kind, flag, what in (("models", "--model", changed), ("benchmarks", "--bench", changed),
                                 ("benchmark_sha256", "--bench", "the file's contents changed (sha256 {0:.12}... then, "
                                                                 "{1:.12}... now)")):
            diffs += [f"{flag} {name}: " + what.format(before[kind][name], value)
                      for name, value in current[kind].items() if before[kind].get(name, value) != value]
            current[kind] = {**before[kind], **current[kind]}
        if diffs:
            raise ValueError("--resume: the settings differ from the run being resumed, so samples would mix:\n  "
                             + "\n  ".join(diffs))
    elif existing:
        raise ValueError(f"--resume: {gen_path} exists but {MANIFEST} does not; it was not written by `eval --model`")
    dropped = drop_torn_tail(gen_path)
    if dropped:
        log(f"[eval] --resume: dropped a torn last line ({dropped} bytes) from {gen_path}; that problem is redone")
    ck.write_json(man_path, current)


def _score_unscored(gen_path: Path, index: LineIndex, scorer: Scorer, fh, log) -> None:
    """Resume: problems whose completions reached the disk but whose correctness line did not."""
    todo = set(index.texts) - set(index.scored)
    if not todo:
        return
    log(f"[eval] --resume: scoring {len(todo)} problems whose completions are on disk")
    pending: list[GenerationRecord] = []
    for _, rec in iter_generation_lines(gen_path):
        if rec.key in todo and rec.completions is not None:
            pending.append(rec)
        if len(pending) >= SCORE_CHUNK:
            _score_and_write(pending, scorer, fh)
    _score_and_write(pending, scorer, fh)


def _score_and_write(records: list[GenerationRecord], scorer: Scorer, fh) -> None:
    scorer.score(records)
    append_lines(fh, [rec.score_line() for rec in records])
    records.clear()


def generate(models: dict[str, str], benchmarks: dict[str, list[dict]], settings: dict, args, out_dir: Path,
             scorer: Scorer, log=print) -> None:
    """Sample every (run, benchmark, problem) not yet on disk; completions are written before they are scored."""
    gen_path = out_dir / GENERATIONS
    index = LineIndex.of([gen_path]) if gen_path.is_file() and gen_path.stat().st_size else LineIndex()
    done = index.scored.keys() | index.texts.keys()
    with gen_path.open("a", encoding="utf-8") as fh:
        _score_unscored(gen_path, index, scorer, fh, log)
        for run, model_path in models.items():
            sampler = None  # loaded only when this run has work left
            for bench, problems in benchmarks.items():
                todo = [p for p in problems if (run, bench, p["id"]) not in done]
                if not todo:
                    continue
                log(f"[eval] {run} on {bench}: {len(todo)} of {len(problems)} problems x n={args.n} ({args.backend})")
                for start in range(0, len(todo), args.problems_per_call):
                    chunk = todo[start : start + args.problems_per_call]
                    if sampler is None:
                        sampler = make_sampler(args.backend, resolve_model_path(model_path), args)
                    encoded = [encode_prompt(p, sampler.tokenizer, settings[bench], args.prompt_style) for p in chunk]
                    plan = [(i, Request(ids, size, request_seed(args.seed, run, bench, p["id"], b)))
                            for i, (p, (ids, _)) in enumerate(zip(chunk, encoded))
                            for b, size in blocks(args.n, args.samples_per_request)]
                    outputs = sampler.sample([req for _, req in plan], temperature=args.temperature, top_p=args.top_p,
                                             max_new_tokens=args.max_new_tokens)
                    texts: list[list[str]] = [[] for _ in chunk]
                    for (i, req), out in zip(plan, outputs):
                        if len(out) != req.n:
                            raise RuntimeError(f"the sampler returned {len(out)} completions for a request of n={req.n}")
                        texts[i].extend(out)
                    records = [GenerationRecord(run=run, benchmark=bench, problem_id=p["id"], completions=t,
                                                answer=p["answer"], data_source=p["data_source"], prompt=text)
                               for p, (_, text), t in zip(chunk, encoded, texts)]
                    if args.save_completions:  # on disk before any scorer runs
                        append_lines(fh, [rec.to_json(with_completions=True) for rec in records])
                        _score_and_write(records, scorer, fh)
                    else:
                        scorer.score(records)
                        append_lines(fh, [rec.to_json(with_completions=False) for rec in records])
            del sampler


def significance_report(scores, pairs: list[tuple[str, str]], benchmarks: list[str], averages: dict, args,
                        out_dir: Path) -> dict[tuple[str, str, int], str]:
    """Paired subsampling test per (baseline, focal) pair, benchmark and average column; write CSV + markdown.

    Returns marks for the main table: a "*" after the focal cell where the difference is significant."""
    marks: dict[tuple[str, str, int], str] = {}
    rows = []
    for pair in pairs:
        per_run = [{bench: scores[(run, bench)] for bench in benchmarks} for run in pair]
        try:
            tested = paired_tests(*per_run, averages, pair, "significance", ks_up_to(args.significance_m, args.k_max),
                                  args.significance_m, args.significance_iterations, args.seed, args.alpha,
                                  args.significance_method)
        except ValueError as err:  # name the flag the user can change
            raise ValueError(f"--significance-m {args.significance_m} {err}; lower --significance-m (the paper: "
                             "m = 256 of n = 1024)") from err
        for column, r in tested:
            rows.append(dict(baseline=pair[0], focal=pair[1], benchmark=column, m=args.significance_m,
                             iterations=args.significance_iterations, **asdict(r)))
            if r.significant:
                marks[(pair[1], column, r.k)] = "*"
    write_csv(out_dir / "significance.csv", rows)
    lines = [f"Paired m-out-of-n subsampling (m={args.significance_m}, {args.significance_iterations} iterations, "
             f"two-sided alpha={args.alpha}, interval: {args.significance_method}); difference = focal - baseline, "
             "pass@k in points (%). Average columns use the mean of their benchmarks' draws of the same iteration.", "",
             "| baseline | focal | benchmark | k | baseline | focal | diff | CI low | CI high | p | significant |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['baseline']} | {r['focal']} | {r['benchmark']} | {r['k']} | {100 * r['baseline_pass_at_k']:.2f} | "
            f"{100 * r['focal_pass_at_k']:.2f} | {100 * r['difference']:+.2f} | {100 * r['ci_low']:+.2f} | "
            f"{100 * r['ci_high']:+.2f} | {r['p_value']:.4f} | {'yes' if r['significant'] else 'no'} |")
    (out_dir / "significance.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return marks


def _prompt_settings(args, bench_names, log) -> dict:
    groups = parse_pairs("--bench-group", args.bench_group)
    unknown = sorted(set(groups) - set(bench_names))
    if unknown:
        raise ValueError(f"--bench-group names benchmarks not given with --bench: {unknown}")
    kwargs = json.loads(args.chat_template_kwargs) if args.chat_template_kwargs else None
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ValueError(f"--chat-template-kwargs must be a JSON object, got {args.chat_template_kwargs!r}")
    out = {}
    for bench in bench_names:
        group, known = benchmark_group(bench, groups)
        if not known:
            log(f"[eval] benchmark {bench!r} is not one of Table 9's; prompt group 'math' "
                f"(set --bench-group {bench}=GROUP)")
        out[bench] = prompt_setting(args.prompt_preset, group, args.system_prompt, kwargs)
        log(f"[eval] {bench}: preset {args.prompt_preset}, group {group}: system prompt "
            f"{out[bench].system_prompt!r}, template variables {out[bench].template_kwargs}")
    return out


def run_eval(args, log=print) -> int:
    out_dir = Path(args.out)
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
    if args.resume and not models:
        raise ValueError("--resume continues a generation run: it needs --model (--from-generations never writes samples)")
    for spec in [args.scorer, *bench_scorers.values()]:
        resolve_scorer(spec)  # an unknown name fails now, in every mode, not after hours of sampling

    benchmarks = {name: load_benchmark(path, name) for name, path in bench_files.items()}
    references = {name: {r["id"]: r for r in recs} for name, recs in benchmarks.items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    with Scorer(lambda bench: bench_scorers.get(bench, args.scorer), args.threshold, references,
                workers=args.score_workers) as scorer:
        if models:
            unknown = sorted(set(bench_scorers) - set(bench_files))
            if unknown:
                raise ValueError(f"--bench-scorer names benchmarks not given with --bench: {unknown}")
            settings = _prompt_settings(args, list(benchmarks), log)
            for path in models.values():
                resolve_model_path(path)  # a typo in the last --model fails now, not after the others' sampling
            with exclusive_out(out_dir):
                prepare_out(out_dir, args, models, bench_files, log)
                generate(models, benchmarks, settings, args, out_dir, scorer, log)
            paths = [out_dir / GENERATIONS]
        else:
            paths = [Path(p) for p in args.from_generations]
        scores = count_correct(paths, scorer, rescore=args.rescore)

    runs = list(dict.fromkeys(run for run, _ in scores))
    columns = list(dict.fromkeys(bench for _, bench in scores))
    unknown = sorted(set(bench_scorers) - set(columns))
    if unknown:
        raise ValueError(f"--bench-scorer names benchmarks that are not in the generations: {unknown}; there: {columns}")
    if args.runs:
        order = [r.strip() for r in args.runs.split(",") if r.strip()]
        missing = sorted(set(order) - set(runs))
        if missing:
            raise ValueError(f"--runs names runs that are not in the generations: {missing}; available: {runs}")
        runs = order
    check_same_problems(scores, runs, columns)
    for name, members in averages.items():
        missing = sorted(set(members) - set(columns))
        if missing or not members:
            raise ValueError(f"--average {name!r} lists benchmarks {missing or members} not among {columns}")
    ks = ks_up_to(max(int(s.n.max()) for s in scores.values()), args.k_max)
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
        marks = significance_report(scores, pairs, columns, averages, args, out_dir)

    paths = write_tables(out_dir, rows, runs, all_columns, ks, marks)
    if not args.no_plots:
        plot_curves(out_dir / "plots", rows, runs, all_columns, ks)
    log(markdown_table(rows, runs, all_columns, ks, marks))
    if marks:
        log("'*' marks a focal cell whose paired difference to the baseline is significant (significance.md).")
    log(f"[eval] wrote {paths['markdown']}, {paths['wide_csv']}, {paths['long_csv']}" +
        ("" if args.no_plots else f", {out_dir / 'plots'}/*.png"))
    return 0
