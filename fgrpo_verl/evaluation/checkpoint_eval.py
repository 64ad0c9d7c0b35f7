"""One evaluation pass on one checkpoint of a run (the job that runs them: eval_job.py; the layout beside each
checkpoint: job/checkpoints.py).

A pass is named by a label that hashes everything deciding its samples and scores (:func:`pass_settings`), so a
result is current only for the same settings, weights and benchmark files. The checkpoint is merged with verl's
model merger (a temporary folder renamed into place: a kill never leaves half a model; reused while its source is
unchanged), split into shards (problems round-robin, one per worker), and each shard is an ``fgrpo-verl eval --out``
of its own, resumed on its own (``--resume``); the shards' generation files make the checkpoint's tables. Seeds
are per request, so the numbers do not depend on the split.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fgrpo_verl.evaluation.generate import resolve_model_path
from fgrpo_verl.evaluation.options import eval_options
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.job import checkpoints as ck

MERGED = "merged_hf"
MERGE_MARKER = "fgrpo_merge.json"


def log(message: str) -> None:
    print(f"[fgrpo eval] {message}", flush=True)


def pass_settings(plan: Plan, phase: str) -> dict:
    """Everything that decides a pass's samples and scores (its label hashes this)."""
    spec = plan.passes[phase]
    benches = {name: {"scorer": plan.benchmarks[name].scorer, "group": plan.benchmarks[name].group}
               for name in spec.benchmarks}
    return {"n": spec.n, "benchmarks": benches, **plan.sampling.model_dump()}


def pass_label(plan: Plan, phase: str) -> str:
    return ck.settings_label(pass_settings(plan, phase))


def pass_dir(plan: Plan, phase: str, step: int) -> Path:
    """The folder of checkpoint ``step``'s pass: its shards, tables, stamp and result."""
    return ck.result_path(plan.run_dir, step, pass_label(plan, phase)).parent


def pass_averages(plan: Plan, phase: str) -> list[str] | None:
    """``--average`` of the recipe's average columns whose benchmarks are all in this pass."""
    names = set(plan.passes[phase].benchmarks)
    return [f"{avg}={','.join(members)}" for avg, members in plan.averages.items() if set(members) <= names] or None


def ensure_merged(ckpt: Path, sig: str) -> Path:
    """An HF model directory of checkpoint ``ckpt``: verl's own merged weights when the checkpoint saved them
    (``checkpoint.save_contents`` with hf_model), else ``fgrpo_eval/merged_hf`` made by verl's model merger (reused
    while it was made from this signature)."""
    try:
        return resolve_model_path(ckpt / "actor")
    except ValueError:
        pass  # sharded only: merge
    target = ckpt / ck.EVAL_DIR / MERGED
    if (ck.read_json(target / MERGE_MARKER) or {}).get("signature") == sig:
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


def pass_options(plan: Plan, phase: str, run_name: str, model: Path, out: Path, resume: bool):
    """The evaluation options (fgrpo_verl/evaluation/options.py) of one checkpoint's pass."""
    benches = [(name, plan.benchmarks[name]) for name in plan.passes[phase].benchmarks]
    return eval_options(
        model=[f"{run_name}={model}"], out=str(out), no_plots=True, n=plan.passes[phase].n, resume=resume,
        bench=[f"{n}={b.file}" for n, b in benches], bench_scorer=[f"{n}={b.scorer}" for n, b in benches],
        bench_group=[f"{n}={b.group}" for n, b in benches], average=pass_averages(plan, phase),
        **plan.sampling.model_dump(), **plan.engine.model_dump())


def _run_eval(options) -> None:
    from fgrpo_verl.evaluation.pipeline import run_eval  # numpy and the scorers: not for launch's pass_label

    # the job log keeps eval's progress lines; the tables are in the folder (and in result.json)
    run_eval(options, log=lambda m: print(m, flush=True) if m.startswith("[eval]") else None)


def _shard_dir(out: Path, shard: int, shards: int) -> Path:
    return out / f"shard-{shard}-of-{shards}"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def prepare_checkpoint(plan: Plan, phase: str, step: int, shards: int) -> dict | None:
    """The current result of checkpoint ``step`` (None: it needs evaluating, and its folder is ready for it: a
    folder of other weights, benchmark files or shard count is removed first, and the checkpoint is merged: here,
    before the job's workers start, so no two mergers ever run at once)."""
    from fgrpo_verl.evaluation.pipeline import file_sha256

    out = pass_dir(plan, phase, step)
    shas = {name: file_sha256(plan.benchmarks[name].file) for name in plan.passes[phase].benchmarks}
    result = ck.current_result(plan.run_dir, step, out.name, shas)
    if result is not None:
        log(f"step {step}: {phase} pass {out.name} was evaluated on this unchanged checkpoint: skipped")
        return result
    actor = ck.checkpoint_dir(plan.run_dir, step) / "actor"
    want = {"signature": ck.signature(actor), "benchmark_sha256": shas, "shards": shards}
    if out.is_dir() and ck.read_json(out / "checkpoint.json") != want:
        log(f"step {step}: {out} holds an evaluation of other weights, benchmark files or shard count: removed")
        shutil.rmtree(out)
    ck.write_json(out / "checkpoint.json", want)
    ensure_merged(actor.parent, want["signature"])
    return None


def run_shard(plan: Plan, phase: str, step: int, shard: int, shards: int) -> None:
    """Evaluate shard ``shard`` of ``shards`` (problems whose index in their benchmark is ``shard`` mod ``shards``)
    of checkpoint ``step``, merged already, with ``fgrpo-verl eval`` (--resume when the shard was started before)."""
    from fgrpo_verl.evaluation.formats import load_benchmark
    from fgrpo_verl.evaluation.pipeline import GENERATIONS, MANIFEST

    out = pass_dir(plan, phase, step)
    here = _shard_dir(out, shard, shards)
    if (here / "done.json").is_file():
        return
    model = ensure_merged(ck.checkpoint_dir(plan.run_dir, step), ck.read_json(out / "checkpoint.json")["signature"])
    files = {}
    for name in plan.passes[phase].benchmarks:
        source = plan.benchmarks[name].file
        if shards == 1:
            files[name] = source
            continue
        path = here / "benchmarks" / f"{name}.jsonl"
        if not path.is_file():
            records = load_benchmark(source, name)[shard::shards]
            ck.write_text(path, "".join(json.dumps(r, default=str) + "\n" for r in records))
        files[name] = str(path)
    shard_plan = plan.model_copy(update={"benchmarks": {
        n: plan.benchmarks[n].model_copy(update={"file": f}) for n, f in files.items()}})
    resume = (here / GENERATIONS).is_file() or (here / MANIFEST).is_file()
    log(f"step {step}: {phase} pass shard {shard + 1}/{shards} ({'resuming' if resume else 'starting'}) -> {here}")
    _run_eval(pass_options(shard_plan, phase, f"step{step}", model, here, resume))
    ck.write_json(here / "done.json", {"finished_at": _now()})


def combine(plan: Plan, phase: str, step: int, shards: int) -> dict:
    """The result of checkpoint ``step`` from its finished shards (tables in its folder, then result.json)."""
    from fgrpo_verl.evaluation.pipeline import GENERATIONS

    out = pass_dir(plan, phase, step)
    parts = [_shard_dir(out, i, shards) for i in range(shards)]
    unfinished = [p.name for p in parts if not (p / "done.json").is_file()]
    if unfinished:
        raise RuntimeError(f"shards {unfinished} of {out} are not finished")
    _run_eval(eval_options(
        out=str(out), no_plots=True, runs=f"step{step}", from_generations=[str(p / GENERATIONS) for p in parts],
        average=pass_averages(plan, phase)))
    values, problems = {}, {}
    with open(out / "pass_at_k_long.csv", newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["pass_at_k"] != "":
                values.setdefault(row["benchmark"], {})[row["k"]] = float(row["pass_at_k"])
            problems[row["benchmark"]] = int(row["num_problems"])
    stamp = ck.read_json(out / "checkpoint.json")
    result = {"step": step, "phase": phase, "label": out.name, "settings": pass_settings(plan, phase),
              "signature": stamp["signature"], "benchmark_sha256": stamp["benchmark_sha256"], "shards": shards,
              "pass_at_k": values, "num_problems": problems, "experiment": plan.experiment,
              "generations": [str(p / GENERATIONS) for p in parts], "evaluated_at": _now()}
    ck.write_json(out / ck.RESULT, result)
    return result


if __name__ == "__main__":  # what job scripts rendered by another version of fgrpo-verl run
    sys.exit("fgrpo eval: error: this job script was planned by another version of fgrpo-verl (it runs "
             "fgrpo_verl.evaluation.checkpoint_eval); launch the recipe again to plan it")
