"""`fgrpo-verl report RECIPE` (fgrpo_verl/launch/recipe_report.py): on an empty results tree it lists every run
as missing and exits 0; on constructed run directories whose answer is known it makes the protocol's choices, puts
our numbers beside the paper's, marks the paired significance and lists exactly what is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.pass_at_k import ks_up_to, pass_at_k_curve

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(600)
def test_report_of_paper_main_on_an_empty_tree_lists_the_36_runs_as_missing_and_exits_0(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fgrpo_verl", "report", "paper_main", "--out", str(tmp_path / "r")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    missing = [line for line in (tmp_path / "r" / "missing.md").read_text().splitlines() if line.startswith("- ")]
    assert len(missing) == 36 and all(line.endswith(": not started") for line in missing)
    # the paper's numbers are there, ours are empty
    assert "| Qwen2.5-7B GRPO | ours | -/- |" in out.stdout and "| | paper | 37.3/64.1 | 15.0/37.7 |" in out.stdout
    assert "| CISPO γ=1 | ours |" in out.stdout and "| | paper | 39.5/76.8 | 18.1/65.9 |" in out.stdout
    rows = (tmp_path / "r" / "table1.csv").read_text().splitlines()
    assert rows[0] == "table,row,column,metric,ours,paper,paper_metric,paper_source,significant"
    assert "table1,Qwen2.5-7B GRPO,Math Avg,pass@1,,37.3,pass@1,Table 1," in rows
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "missing.md", "report.md", "selection.csv", "table1.csv", "table1.md", "table6.csv", "table6.md",
        "tables12_14.md"]


def test_an_unknown_recipe_or_one_without_evaluation_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fgrpo_verl", "report", "no_such_recipe"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "no_such_recipe" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, "-m", "fgrpo_verl", "report", "maze"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "has no evaluation block" in out.stderr and "Traceback" not in out.stderr


# ---- constructed run directories ----------------------------------------------------------------------------------
SEL = {0.0: {2: 0.30, 4: 0.40}, 0.5: {2: 0.45, 4: 0.35}, 1.0: {2: 0.42, 4: 0.50}}
PROBLEMS, N = 40, 16


def recipe(tmp_path: Path) -> Path:
    data = {
        "name": "tiny", "project": "tiny", "reproduces": "a constructed test",
        "common": ["backend=cpu", "algo=grpo", f"actor_rollout_ref.model.path={tmp_path / 'model'}",
                   "data.train_files=x.parquet", "data.val_files=x.parquet", "data.train_batch_size=4",
                   "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                   "data.max_response_length=16", "trainer.total_epochs=2"],
        "runs": [{"name": f"g{g}", "group": "g", "overrides": [f"algorithm.fgrpo.gamma={g}"]} for g in SEL],
        "evaluation": {"benchmarks": {"maze": "bench.jsonl"}, "select_by": "maze", "selection": {"n": 4},
                       "final": {"n": N}, "backend": "transformers", "prompt_preset": "none",
                       "max_new_tokens": "train", "tables": ["table1", "table6", "curves"]},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write_final(run: Path, step: int, label: str, rate: float, seed: int) -> None:
    """A final result and its generations: PROBLEMS problems, N samples each, success probability ``rate``."""
    rng = np.random.default_rng(seed)
    out = run / f"global_step_{step}" / ck.EVAL_DIR / label
    out.mkdir(parents=True, exist_ok=True)
    lines, cs = [], []
    for i in range(PROBLEMS):
        correct = (rng.random(N) < rate).astype(int).tolist()
        cs.append(sum(correct))
        lines.append(json.dumps({"run": f"step{step}", "benchmark": "maze", "problem_id": str(i), "correct": correct}))
    (out / "generations.jsonl").write_text("\n".join(lines) + "\n")
    ks = ks_up_to(N, 256)
    curve = pass_at_k_curve(np.full(PROBLEMS, N), np.array(cs), ks)
    ck.write_json(out / ck.RESULT, {"step": step, "signature": ck.signature(run / f"global_step_{step}" / "actor"),
                                    "pass_at_k": {"maze": {str(k): float(v) for k, v in zip(ks, curve)}},
                                    "generations": [str(out / "generations.jsonl")]})


@pytest.fixture
def tiny(tmp_path):
    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.launch import plan_jobs
    from fgrpo_verl.launch.identity import write_record

    (tmp_path / "bench.jsonl").write_text('{"id": 1, "problem": "p", "answer": "a"}\n')
    path = recipe(tmp_path)
    _, jobs = plan_jobs(str(path), None, [], tmp_path / "logs", tmp_path)
    runs = {}
    for job in jobs:
        gamma = float(job.config.algorithm.fgrpo.gamma)
        run = job.checkpoint_dir
        write_record(run, job.fingerprint, job.job_name, job.overrides)
        plan = job.evaluation.jobs[0].plan
        for step, value in SEL[gamma].items():
            actor = run / f"global_step_{step}" / "actor"
            actor.mkdir(parents=True)
            (actor / "model_world_size_1_rank_0.pt").write_bytes(os.urandom(8))
            ck.write_json(ck.result_path(run, step, ce.pass_label(plan, "selection")),
                          {"step": step, "signature": ck.signature(actor), "pass_at_k": {"maze": {"1": value}}})
        (run / "latest_checkpointed_iteration.txt").write_text("4")
        ck.write_steps(run, 2, 2, 4, 8, 4)
        runs[gamma] = (run, ce.pass_label(plan, "final"))
    # the protocol's answer: baseline 4 (0.40); γ 0.5 at 2 (0.45 > 0.35), γ 1 at 4 (0.50); γ = 1 (0.50 > 0.45)
    write_final(runs[0.0][0], 4, runs[0.0][1], 0.2, 0)
    write_final(runs[0.5][0], 2, runs[0.5][1], 0.5, 1)
    write_final(runs[1.0][0], 4, runs[1.0][1], 0.8, 2)
    return tmp_path, path, runs


def test_report_makes_the_protocols_choices_and_marks_significance(tiny):
    from fgrpo_verl.launch.recipe_report import build_report

    root, path, runs = tiny
    text = build_report(str(path), root, root / "r", (500, "paper", 0))
    selection = {row.split(",")[0]: row.split(",")[4] for row in (root / "r" / "selection.csv").read_text().splitlines()[1:]}
    assert selection == {"g0.0": "4", "g0.5": "2", "g1.0": "4"}
    final = {g: json.loads(ck.result_path(run, 4 if g != 0.5 else 2, label).read_text())["pass_at_k"]["maze"]
             for g, (run, label) in runs.items()}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if " | ours | " in line}
    assert set(rows) == {"model GRPO", "model F-GRPO (γ=1)", "GRPO γ=0", "GRPO γ=0.5", "GRPO γ=1"}
    # Table 1: pass@1/pass@16 (n = 16 allows no 256), the focal cell marked: 0.8 against 0.2 on 40 problems
    assert f"{100 * final[1.0]['1']:.1f}/{100 * final[1.0]['16']:.1f}*" in rows["model F-GRPO (γ=1)"]
    assert f"{100 * final[0.0]['1']:.1f}/{100 * final[0.0]['16']:.1f} |" in rows["model GRPO"]
    assert "pass@1/pass@16 (%)" in text and "nothing: every run is finished and evaluated" in text
    sig = (root / "r" / "significance.csv").read_text().splitlines()
    assert sig[0].startswith("baseline,focal,column,k,m,iterations,method") and ",maze,1,4,500,paper," in sig[1]
    # Table 6: every γ at its own selected checkpoint
    assert f"{100 * final[0.5]['1']:.1f}/{100 * final[0.5]['16']:.1f}" in rows["GRPO γ=0.5"]
    # the model is not the paper's: no paper numbers, no invented ones
    assert all(cell.strip() in ("-/-", "") for line in text.splitlines() if line.startswith("| | paper")
               for cell in line.split("|")[3:-1])
    assert (root / "r" / "curves" / "model-grpo" / "pass_at_k_maze.png").is_file()


def test_report_lists_what_is_missing_instead_of_dropping_it(tiny):
    from fgrpo_verl.launch.recipe_report import build_report

    root, path, runs = tiny
    run, label = runs[0.5]
    (ck.result_path(run, 2, label)).unlink()
    other, _ = runs[1.0]
    (other / "global_step_4" / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"retrained")  # stale result
    text = build_report(str(path), root, root / "r", None)
    missing = (root / "r" / "missing.md").read_text()
    assert "g0.5" in missing and "final pass (n=16) of the selected checkpoint 2 not evaluated" in missing
    assert "g1.0" in missing and "selection pass: checkpoints [4] not evaluated" in missing
    assert "γ not chosen yet" in text
    assert "significance" not in text.split("### Missing")[0].lower().replace("significance.csv", "")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("recipe_name, rows", [
    ("group_size", {"GRPO N=2": "36.2/75.0", "GRPO N=32": "39.2/70.1", "F-GRPO N=8": "38.6/70.3"}),
    ("controls", {"GRPO low-LR (6.8e-7)": "37.8/69.2", "GRPO-H (entropy 1e-3)": "37.8/69.5",
                  "GRPO-KL (1e-3)": "37.2/72.0", "F-GRPO (γ=0.5)": "38.6/70.3"}),
])
def test_tables_2_and_3_label_each_run_as_the_papers_row_it_reproduces(tmp_path, recipe_name, rows):
    from fgrpo_verl.launch.recipe_report import build_report

    text = build_report(recipe_name, tmp_path, tmp_path / "r", None)
    lines = text.splitlines()
    for label, paper in rows.items():
        i = lines.index(next(line for line in lines if line.startswith(f"| {label} | ours |")))
        assert lines[i + 1].startswith(f"| | paper | {paper} |"), (label, lines[i + 1])
    if recipe_name == "controls":
        assert "DS-GRPO (Table 3) is not in the recipe" in text
    else:
        assert "ΔNLL_rare" in text
