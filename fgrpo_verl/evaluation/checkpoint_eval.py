"""What an evaluation job runs: merge a run's checkpoints with verl's model merger, evaluate them with
``fgrpo-verl eval``, write the results beside each checkpoint and log them to the training run's W&B run.

    python -m fgrpo_verl.evaluation.checkpoint_eval selection --plan PLAN.json   (or --plan - : from stdin)
    python -m fgrpo_verl.evaluation.checkpoint_eval final --plan PLAN.json

The plan (evaluation/plan.py; written by ``fgrpo-verl launch`` into the job script) names the run
directory, the benchmarks, the two passes (``selection``: small n on every epoch checkpoint; ``final``: n = 1024 on
the checkpoint the protocol selects), the sampling settings (the Table 9 preset and length of the run's base model),
the engine and the W&B run. Phases:

- ``selection``: every epoch checkpoint the run has saved (steps that are multiples of its save_freq, and the last;
  a stop checkpoint in between is not a candidate and is skipped, saying so). Works on an unfinished run too (the
  checkpoints so far); W&B logging waits until the run is finished (an unfinished run resumes and logs training
  steps after these rows, which W&B would drop as out of order).
- ``final``: refuses until this run and its γ = 0 baseline are finished and fully scored; then chooses the
  checkpoint (protocol.py, selection.py), records the choice in ``fgrpo_eval/selected.json`` and evaluates it.

Per checkpoint (job/checkpoints.py has the layout): an unchanged checkpoint with a current result is skipped; a merge
is reused while its source is unchanged (merges go to a temporary folder renamed into place, so a kill never
leaves half a model); a killed evaluation continues with ``eval --resume``; results of a changed checkpoint or an
edited benchmark file are removed and redone. With several GPUs and ``tensor_parallel_size`` t, the job runs
GPUs / t worker processes, each on its own GPUs; every checkpoint is split into one shard per worker (its problems
round-robin), so a single checkpoint (the final pass) uses every GPU; each shard is an ``eval --out`` of its own
(resumed on its own), and the shards' generation files make the checkpoint's tables. Seeds are per request, so the
numbers do not depend on the split.

W&B: the rows go to the run's id (``WANDB_RUN_ID``, resume allow) at steps after the training's last step, in
ascending checkpoint order and only as a gap-free prefix (W&B keeps a history in order; a later, lower step would
be dropped): per checkpoint one row with ``eval/checkpoint_step`` and ``eval/<phase>/<benchmark>/pass@<k>`` (W&B
plots them against the checkpoint step: ``define_metric``), a table ``eval/<phase>/pass_at_k_table`` and a summary
entry ``eval/<phase>/step_<s>``. ``fgrpo_eval/wandb_ledger.json`` records what was logged (written after W&B
closed the run, so a killed job logs its rows again at the same W&B steps, never skips one).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.evaluation.protocol import choose, run_scores

PHASES = ("selection", "final")
MERGED = "merged_hf"
MERGE_MARKER = "fgrpo_merge.json"
LEDGER = "wandb_ledger.json"
SELECTED = "selected.json"


def log(message: str) -> None:
    print(f"[fgrpo eval] {message}", flush=True)


def file_sha256(path) -> str:
    """The benchmark file's sha256, as ``eval --resume`` records it (pipeline.py)."""
    from fgrpo_verl.evaluation.pipeline import _sha256

    return _sha256(path)


# ---------------------------------------------------------------------------------------------------- settings
def pass_settings(plan: Plan, phase: str) -> dict:
    """Everything that decides a pass's samples and scores (its label hashes this)."""
    spec = plan.passes[phase]
    benches = {name: {"scorer": plan.benchmarks[name].scorer, "group": plan.benchmarks[name].group}
               for name in spec.benchmarks}
    return {"n": spec.n, "benchmarks": benches, **dataclasses.asdict(plan.sampling)}


def pass_label(plan: Plan, phase: str) -> str:
    return ck.settings_label(pass_settings(plan, phase))


def pass_averages(plan: Plan, phase: str) -> dict[str, list[str]]:
    """The recipe's average columns whose benchmarks are all in this pass."""
    names = set(plan.passes[phase].benchmarks)
    return {avg: list(members) for avg, members in plan.averages.items() if set(members) <= names}


# ---------------------------------------------------------------------------------------------------- merge
def ensure_merged(ckpt: Path, sig: str) -> Path:
    """An HF model directory of checkpoint ``ckpt``: verl's own merged weights when the checkpoint saved them
    (``checkpoint.save_contents`` with hf_model), else ``fgrpo_eval/merged_hf`` made by verl's model merger (reused
    while it was made from this signature)."""
    from fgrpo_verl.evaluation.generate import resolve_model_path

    try:
        return resolve_model_path(ckpt / "actor")
    except ValueError:
        pass  # sharded only: merge
    target = ckpt / ck.EVAL_DIR / MERGED
    marker = ck.read_json(target / MERGE_MARKER) if target.is_dir() else None
    if marker is not None and marker.get("signature") == sig:
        return target
    tmp = ckpt / ck.EVAL_DIR / f".{MERGED}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    log(f"{ckpt.name}: merging with verl's model merger -> {target}")
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(ckpt / "actor"),
           "--target_dir", str(tmp)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{ckpt}: verl's model merger failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}\n  command: {' '.join(cmd)}")
    ck.write_json(tmp / MERGE_MARKER, {"signature": sig, "source": str(ckpt / "actor"), "command": cmd})
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


# ---------------------------------------------------------------------------------------------------- evaluate
def pass_options(plan: Plan, phase: str, run_name: str, model: Path, out: Path, resume: bool):
    """The evaluation options (fgrpo_verl/evaluation/options.py) of one checkpoint's pass."""
    from fgrpo_verl.evaluation.options import eval_options, from_text

    settings = plan.sampling
    names = plan.passes[phase].benchmarks
    benches = [plan.benchmarks[name] for name in names]
    return eval_options(
        model=[f"{run_name}={model}"], out=str(out), no_plots=True, n=plan.passes[phase].n,
        backend=settings.backend, temperature=float(settings.temperature), top_p=float(settings.top_p),
        seed=settings.seed, prompt_preset=settings.prompt_preset, max_new_tokens=settings.max_new_tokens,
        threshold=float(settings.threshold),
        bench=[f"{n}={b.file}" for n, b in zip(names, benches)],
        bench_scorer=[f"{n}={b.scorer}" for n, b in zip(names, benches)],
        bench_group=[f"{n}={b.group}" for n, b in zip(names, benches)],
        average=[f"{avg}={','.join(members)}" for avg, members in pass_averages(plan, phase).items()] or None,
        resume=resume,
        # the recipe's engine: block, read as the command line reads its text (a mapping as JSON)
        **{key: from_text(key, value if isinstance(value, str) else json.dumps(value))
           for key, value in plan.engine.items() if value is not None},
    )


def _read_long_csv(path: Path) -> tuple[dict, dict]:
    values, problems = {}, {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["pass_at_k"] != "":
                values.setdefault(row["benchmark"], {})[row["k"]] = float(row["pass_at_k"])
            problems[row["benchmark"]] = int(row["num_problems"])
    return values, problems


def _shard_dir(out: Path, shard: int, shards: int) -> Path:
    return out / f"shard-{shard}-of-{shards}"


def _run_eval(options) -> None:
    from fgrpo_verl.evaluation.pipeline import run_eval

    # the job log keeps eval's progress lines; the tables are in the folder (and in result.json)
    run_eval(options, log=lambda m: print(m, flush=True) if m.startswith("[eval]") else None)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def prepare_checkpoint(plan: Plan, phase: str, step: int, shards: int) -> dict | None:
    """The current result of checkpoint ``step`` (None: it needs evaluating, and its folder is ready for it: a
    folder of other weights, benchmark files or shard count is removed first)."""
    run_dir = Path(plan.run_dir)
    label = pass_label(plan, phase)
    ckpt = ck.checkpoint_dir(run_dir, step)
    sig = ck.signature(ckpt / "actor")
    shas = {name: file_sha256(plan.benchmarks[name].file) for name in plan.passes[phase].benchmarks}
    result = ck.current_result(run_dir, step, label, shas)
    if result is not None:
        log(f"step {step}: {phase} pass {label} was evaluated on this unchanged checkpoint: skipped")
        return result
    out = ckpt / ck.EVAL_DIR / label
    want = {"signature": sig, "benchmark_sha256": shas, "shards": shards}
    stamp = ck.read_json(out / "checkpoint.json") if out.is_dir() else None
    if out.is_dir() and stamp != want:
        log(f"step {step}: {out} holds an evaluation of other weights, benchmark files or shard count: removed")
        shutil.rmtree(out)
    ck.write_json(out / "checkpoint.json", want)
    return None


def run_shard(plan: Plan, phase: str, step: int, shard: int, shards: int) -> None:
    """Evaluate shard ``shard`` of ``shards`` (problems whose index in their benchmark is ``shard`` mod ``shards``)
    of checkpoint ``step``: merge it if needed (one merger at a time), then ``fgrpo-verl eval`` (--resume when the
    shard was started before)."""
    from fgrpo_verl.evaluation.formats import load_benchmark
    from fgrpo_verl.evaluation.pipeline import GENERATIONS, MANIFEST
    from fgrpo_verl.job.locks import exclusive

    ckpt = ck.checkpoint_dir(Path(plan.run_dir), step)
    out = ckpt / ck.EVAL_DIR / pass_label(plan, phase)
    here = _shard_dir(out, shard, shards)
    if (here / "done.json").is_file():
        return
    stamp = ck.read_json(out / "checkpoint.json")
    # the workers of a job (and of other jobs on this run) share the run directory: one merges, the others wait and
    # reuse its merge. Also where the file system has no flock (job/locks.py).
    with exclusive(ckpt / ck.EVAL_DIR / ".merge.lock", log=log):
        model = ensure_merged(ckpt, stamp["signature"])
    files = {}
    for name in plan.passes[phase].benchmarks:
        source = plan.benchmarks[name].file
        if shards == 1:
            files[name] = source
            continue
        path = here / "benchmarks" / f"{name}.jsonl"
        if not path.is_file():
            records = load_benchmark(source, name)[shard::shards]
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text("".join(json.dumps(r, default=str) + "\n" for r in records), encoding="utf-8")
            os.replace(tmp, path)
        files[name] = str(path)
    shard_plan = dataclasses.replace(plan, benchmarks={n: dataclasses.replace(plan.benchmarks[n], file=f)
                                                       for n, f in files.items()})
    resume = (here / GENERATIONS).is_file() or (here / MANIFEST).is_file()
    log(f"step {step}: {phase} pass shard {shard + 1}/{shards} ({'resuming' if resume else 'starting'}) -> {here}")
    _run_eval(pass_options(shard_plan, phase, f"step{step}", model, here, resume))
    ck.write_json(here / "done.json", {"finished_at": _now()})


def combine(plan: Plan, phase: str, step: int, shards: int) -> dict:
    """The result of checkpoint ``step`` from its finished shards (tables in its folder, then result.json)."""
    from fgrpo_verl.evaluation.pipeline import GENERATIONS

    run_dir = Path(plan.run_dir)
    out = ck.checkpoint_dir(run_dir, step) / ck.EVAL_DIR / pass_label(plan, phase)
    parts = [_shard_dir(out, i, shards) for i in range(shards)]
    unfinished = [p.name for p in parts if not (p / "done.json").is_file()]
    if unfinished:
        raise RuntimeError(f"shards {unfinished} of {out} are not finished")
    from fgrpo_verl.evaluation.options import eval_options

    _run_eval(eval_options(
        out=str(out), no_plots=True, runs=f"step{step}", from_generations=[str(p / GENERATIONS) for p in parts],
        average=[f"{avg}={','.join(members)}" for avg, members in pass_averages(plan, phase).items()] or None))
    values, problems = _read_long_csv(out / "pass_at_k_long.csv")
    stamp = ck.read_json(out / "checkpoint.json")
    result = {"step": step, "phase": phase, "label": out.name, "settings": pass_settings(plan, phase),
              "signature": stamp["signature"], "benchmark_sha256": stamp["benchmark_sha256"], "shards": shards,
              "pass_at_k": values, "num_problems": problems, "experiment": plan.experiment,
              "generations": [str(p / GENERATIONS) for p in parts], "evaluated_at": _now()}
    ck.write_json(out / ck.RESULT, result)
    return result


# ---------------------------------------------------------------------------------------------------- workers
def _gpu_slices(plan: Plan) -> list[str | None]:
    """One entry per worker: its CUDA_VISIBLE_DEVICES (None: no GPU assignment, the CPU back-end)."""
    if plan.sampling.backend != "vllm":
        return [None] * max(1, plan.workers)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = [g for g in visible.split(",") if g] if visible else [str(i) for i in range(plan.gpus)]
    tp = int(plan.engine.get("tensor_parallel_size") or 1)
    if len(gpus) < tp:
        raise ValueError(f"tensor_parallel_size={tp} needs {tp} GPUs, this job sees {len(gpus)} ({gpus})")
    return [",".join(gpus[i * tp:(i + 1) * tp]) for i in range(len(gpus) // tp)]


def evaluate_steps(plan: Plan, phase: str, steps: list[int], plan_path: Path | None) -> dict[int, dict | str]:
    """``{step: result or why not}``. Each checkpoint is split into one shard per worker (problems round-robin), so
    one checkpoint (the final pass) uses every GPU; shards write their own ``eval --out`` and resume on their own."""
    slices = _gpu_slices(plan)
    shards = len(slices)
    results: dict[int, dict | str] = {}
    todo = []
    for step in steps:
        try:
            current = prepare_checkpoint(plan, phase, step, shards)
        except (OSError, ValueError) as exc:
            results[step] = f"{type(exc).__name__}: {exc}"
            continue
        if current is not None:
            results[step] = current
        else:
            todo.append(step)
    if shards == 1 or plan_path is None or not todo:
        for step in todo:
            try:
                for shard in range(shards):
                    run_shard(plan, phase, step, shard, shards)
                results[step] = combine(plan, phase, step, shards)
            except Exception as exc:  # one bad checkpoint must not stop the others; reported at the end
                results[step] = f"{type(exc).__name__}: {exc}"
                log(f"step {step}: failed: {results[step]}")
        return results
    procs = []
    for shard, devices in enumerate(slices):
        env = dict(os.environ)
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = devices
        cmd = [sys.executable, "-m", "fgrpo_verl.evaluation.checkpoint_eval", phase, "--plan", str(plan_path),
               "--steps", ",".join(map(str, todo)), "--shard", f"{shard}/{shards}"]
        log(f"worker {shard} (GPUs {devices}): shard {shard + 1}/{shards} of steps {todo}")
        procs.append(subprocess.Popen(cmd, env=env))
    for proc in procs:
        proc.wait()
    for step in todo:
        try:
            results[step] = combine(plan, phase, step, shards)
        except Exception as exc:
            results[step] = f"{type(exc).__name__}: {exc}"
            log(f"step {step}: failed: {results[step]}")
    return results


# ---------------------------------------------------------------------------------------------------- W&B
def log_to_wandb(plan: Plan, phase: str, ordered: list[tuple[int, dict]]) -> list[int]:
    """Log ``ordered`` (ascending steps, each with its result) to the run's W&B run; returns the steps logged."""
    run_dir = Path(plan.run_dir)
    ledger_path = run_dir / ck.EVAL_DIR / LEDGER
    ledger = ck.read_json(ledger_path) or {"rows": []}
    label = pass_label(plan, phase)
    done = {(row["label"], row["step"]) for row in ledger["rows"]}
    new = [(s, r) for s, r in ordered if (label, s) not in done]
    if not new:
        return []
    import wandb

    _, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
    run = wandb.init(project=plan.project, id=plan.wandb.run_id, resume="allow", name=plan.experiment)
    run.define_metric("eval/checkpoint_step")
    run.define_metric("eval/*", step_metric="eval/checkpoint_step")
    rows = list(ledger["rows"])
    for step, result in new:
        wandb_step = int(total) + len(rows) + 1
        row: dict = {"eval/checkpoint_step": step}
        table = wandb.Table(columns=["checkpoint_step", "benchmark", "k", "pass_at_k", "num_problems", "n"])
        summary = {}
        for column, by_k in result["pass_at_k"].items():
            for k, value in sorted(by_k.items(), key=lambda kv: int(kv[0])):
                row[f"eval/{phase}/{column}/pass@{k}"] = value
                table.add_data(step, column, int(k), value, result["num_problems"].get(column), result["settings"]["n"])
                summary.setdefault(column, {})[f"pass@{k}"] = value
        row[f"eval/{phase}/pass_at_k_table"] = table
        run.log(row, step=wandb_step)
        run.summary[f"eval/{phase}/step_{step}"] = summary
        rows.append({"label": label, "phase": phase, "step": step, "wandb_step": wandb_step})
    if phase == "final":
        run.summary["eval/selected_step"] = new[-1][0]
    run.finish()
    ck.write_json(ledger_path, {"run_id": plan.wandb.run_id, "rows": rows})
    return [s for s, _ in new]


# ---------------------------------------------------------------------------------------------------- phases
def choose_checkpoint(plan: Plan) -> tuple[int | None, str]:
    """The final pass's checkpoint for this run (protocol.py), with how it was chosen or why there is none."""
    label = pass_label(plan, "selection")
    own = run_scores(plan.run, Path(plan.run_dir), plan.steps, label, plan.select_by)
    baseline = None
    if plan.baseline is not None:
        base = plan.baseline
        baseline = run_scores(base.run, Path(base.run_dir), base.steps, label, plan.select_by)
    chosen = choose(own, plan.gamma, baseline)
    return (None if chosen.checkpoint is None else chosen.checkpoint.step), chosen.constraint


def run_phase(plan: Plan, phase: str, plan_path: Path | None = None) -> int:
    run_dir = Path(plan.run_dir)
    save_freq, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
    done = ck.training_done(run_dir, plan.steps.total)
    saved = ck.saved_steps(run_dir)
    if phase == "selection":
        expected = set(ck.epoch_steps(save_freq, total))
        steps = [s for s in saved if s in expected]
        others = [s for s in saved if s not in expected]
        if others:
            log(f"checkpoints {others} are not epoch checkpoints (save_freq {save_freq}, last step {total}): "
                "not candidates, not evaluated")
        if not done:
            log(f"training not finished (step {ck.tracker_step(run_dir)} of {total}): evaluating the {len(steps)} "
                "epoch checkpoint(s) saved so far; W&B logging waits for the finished run")
    else:
        step, how = choose_checkpoint(plan)
        if step is None:
            log(f"no checkpoint can be selected yet: {how}; relaunch the recipe once that is done")
            return 1
        log(f"selected checkpoint {step}: {how}")
        ck.write_json(run_dir / ck.EVAL_DIR / SELECTED, {
            "step": step, "how": how, "gamma": plan.gamma, "selection_label": pass_label(plan, "selection"),
            "final_label": pass_label(plan, "final"), "baseline": plan.baseline and plan.baseline.run})
        steps = [step]
    if not steps:
        log("no checkpoint to evaluate")
        return 0
    results = evaluate_steps(plan, phase, steps, plan_path)
    failed = {s: r for s, r in results.items() if isinstance(r, str)}
    ordered = []
    for step in sorted(results):
        if isinstance(results[step], str):
            break  # W&B history is in order: nothing after a gap
        ordered.append((step, results[step]))
    if plan.wandb.log and done:
        logged = log_to_wandb(plan, phase, ordered)
        log(f"W&B run {plan.wandb.run_id}: logged checkpoints {logged}" if logged else
            f"W&B run {plan.wandb.run_id}: nothing new to log")
    for step, why in failed.items():
        log(f"step {step}: not evaluated: {why}")
    log(f"{phase} pass: {len(results) - len(failed)} of {len(results)} checkpoint(s) evaluated")
    return 1 if failed else 0


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    # the job script sends SIGTERM before a requeue: as SystemExit it unwinds the `finally` blocks, which release
    # the merge and eval locks (on a file system without flock an unreleased owner file blocks for stale_after)
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fgrpo_verl.evaluation.checkpoint_eval",
                                     description="evaluate a run's checkpoints (launched by fgrpo-verl launch)")
    parser.add_argument("phase", choices=PHASES)
    parser.add_argument("--plan", required=True, help="the job's plan (JSON file, or - for stdin)")
    parser.add_argument("--steps", default=None, help="(worker) checkpoint steps to evaluate a shard of")
    parser.add_argument("--shard", default=None, help="(worker) I/S: evaluate shard I of S of each step")
    args = parser.parse_args(argv)
    try:
        plan = Plan.from_json(sys.stdin.read() if args.plan == "-" else Path(args.plan).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"fgrpo eval: error: cannot read the plan {args.plan}: {exc}", file=sys.stderr)
        return 2
    if args.steps is not None:  # a worker of a multi-GPU job
        shard, shards = (int(x) for x in args.shard.split("/"))
        bad = 0
        for step in (int(s) for s in args.steps.split(",") if s):
            try:
                run_shard(plan, args.phase, step, shard, shards)
            except Exception as exc:
                log(f"step {step} shard {shard + 1}/{shards}: failed: {type(exc).__name__}: {exc}")
                bad += 1
        return 1 if bad else 0
    plan_path = None
    if args.plan == "-":
        # workers read the plan from a file in the run dir (removed at the end)
        plan_path = Path(plan.run_dir) / ck.EVAL_DIR / f".plan-{args.phase}-{os.getpid()}.json"
        ck.write_json(plan_path, plan.to_dict())
    else:
        plan_path = Path(args.plan)
    try:
        return run_phase(plan, args.phase, plan_path)
    except ValueError as exc:
        print(f"fgrpo eval: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.plan == "-" and plan_path is not None:
            plan_path.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
