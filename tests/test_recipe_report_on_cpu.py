"""`fgrpo-verl report RECIPE` (fgrpo_verl/launch/recipe_report.py): on an empty results tree it lists every run
as missing and exits 0; on constructed run directories whose answer is known it makes the protocol's choices, puts
our numbers beside the paper's, marks the paired significance and lists exactly what is missing."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.pass_at_k import ks_up_to, pass_at_k_curve

REPO = Path(__file__).resolve().parent.parent


# `fgrpo-verl report paper_main` on an empty tree (the sweep's state first, every run missing, no empty table, the
# paper's numbers in the table files) is checked on the README's own run of that command
# (tests/test_readme_on_cpu.py, CASES), a fresh process as a user runs it.


def test_an_unknown_recipe_or_one_that_writes_nothing_to_report_is_a_clear_error(tmp_path, monkeypatch, capsys):
    from fgrpo_verl.cli import main
    from fgrpo_verl.launch.recipe_report import build_report

    # the CLI's entry point, as `python -m fgrpo_verl` calls it; that a fresh process exits with its status and no
    # traceback is tests/test_first_hour_on_cpu.py's test_misspelt_key_through_the_real_entry_point_and_debug_...
    monkeypatch.chdir(tmp_path)
    assert main(["report", "no_such_recipe"]) == 2
    err = capsys.readouterr().err
    assert "no_such_recipe" in err and "Traceback" not in err
    data = yaml.safe_load(recipe(tmp_path).read_text())
    del data["evaluation"]
    data["common"].append("trainer.test_freq=-1")
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"^recipe tiny: no evaluation block and its runs do not validate while "
                                         r"training \(trainer.test_freq=-1\)"):
        build_report(str(tmp_path / "tiny.yaml"), tmp_path, tmp_path / "r", None)


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
    from fgrpo_verl.job.run_record import write_record

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

    build_report(recipe_name, tmp_path, tmp_path / "r", None)
    # no run has results here: the table is in its file, not printed
    text = (tmp_path / "r" / ("table2.md" if recipe_name == "group_size" else "table3.md")).read_text()
    lines = text.splitlines()
    for label, paper in rows.items():
        i = lines.index(next(line for line in lines if line.startswith(f"| {label} | ours |")))
        assert lines[i + 1].startswith(f"| | paper | {paper} |"), (label, lines[i + 1])
    if recipe_name == "controls":
        assert "DS-GRPO (Table 3) is not in the recipe" in text
    else:
        assert "ΔNLL_rare" in text


def test_the_significance_test_scores_unscored_lines_with_each_benchmarks_own_scorer(tmp_path, monkeypatch):
    """GPQA's unscored lines are scored with its ``boxed`` scorer (math-verify would also accept ``\\boxed{b}``
    for B); SynLogic, whose scorer is not set here, is left out with a line naming it; scored lines keep theirs."""
    from fgrpo_verl.evaluation.plan import BenchmarkFile
    from fgrpo_verl.launch.recipe_report import _counts

    monkeypatch.delenv("FGRPO_SYNLOGIC_SCORER", raising=False)
    lines = [{"run": "r", "benchmark": "GPQA", "problem_id": "1", "answer": "B",
              "completions": ["\\boxed{B}", "\\boxed{b}", "no answer"]},
             {"run": "r", "benchmark": "SynLogic", "problem_id": "1", "answer": "x", "completions": ["x", "y", "z"]},
             {"run": "r", "benchmark": "AIME24", "problem_id": "1", "correct": [1, 1, 0]}]
    gen = tmp_path / "generations.jsonl"
    gen.write_text("".join(json.dumps(line) + "\n" for line in lines))
    benches = {"GPQA": BenchmarkFile(str(tmp_path / "GPQA.jsonl"), "boxed", "ood"),
               "SynLogic": BenchmarkFile(str(tmp_path / "SynLogic.jsonl"), "${FGRPO_SYNLOGIC_SCORER}", "ood"),
               "AIME24": BenchmarkFile(str(tmp_path / "AIME24.jsonl"), "math", "math")}
    counts, skipped = _counts({"generations": [str(gen)]}, benches, 1.0)
    assert sorted(counts) == ["AIME24", "GPQA"]
    assert counts["GPQA"].c.tolist() == [1] and counts["AIME24"].c.tolist() == [2]
    assert skipped == ["SynLogic: its scorer ${FGRPO_SYNLOGIC_SCORER} is not set here: "
                       "export FGRPO_SYNLOGIC_SCORER=module:function"]


def _val_line(step: int, p1: float, p128: float, p256: float) -> str:
    return (f"(TaskRunner pid=7) step:{step} - actor/pg_loss:0.01 - val-core/maze/pass@1:{p1} - "
            f"val-core/maze/pass@128:{p128} - val-core/maze/pass@256:{p256} - val-core/maze/pass@2048:0.99\n")


@pytest.mark.timeout(600)
def test_report_maze_builds_table_4_from_the_runs_validation_in_their_slurm_logs(tmp_path, monkeypatch):
    """The maze recipe has no evaluation block: its runs validate every 1,000 steps (n = 2048) and verl prints
    val-core/maze/pass@k on its step lines, into the Slurm logs. Table 4 is the last step's, beside the paper's."""
    import fgrpo_verl.launch.recipe_report as rr
    from fgrpo_verl.launch import plan_jobs

    monkeypatch.setattr(rr, "_TAIL_START", 64)  # the log's end holds no validation: the search widens
    _, jobs = plan_jobs("maze", None, [], tmp_path / "slurm_logs", tmp_path, check=False)
    jobs = {job.run.name: job for job in jobs}
    logs = tmp_path / "slurm_logs"
    logs.mkdir()
    for name, (last, values) in {"n4-g0p0": (20000, (0.70, 0.75, 0.76)), "n4-g0p5": (20000, (0.80, 0.85, 0.86)),
                                 "n8-g0p0": (5000, (0.60, 0.65, 0.66))}.items():
        job = jobs[name]
        job.checkpoint_dir.mkdir(parents=True)
        (job.checkpoint_dir / "latest_checkpointed_iteration.txt").write_text(str(last))
        text = _val_line(1000, 0.1, 0.2, 0.3) + _val_line(last, *values) + "".join(
            f"(TaskRunner pid=7) step:{last} - timing_s/save:1.0\n" for _ in range(20))
        (logs / f"{job.job_name}-101.out").write_text(text)
    text = rr.build_report("maze", tmp_path, tmp_path / "r", None)
    lines = text.splitlines()
    assert lines[2] == "3 of 18 runs started, 2 finished, 2 validated at their last step (20000)"
    i = lines.index(next(line for line in lines if line.startswith("| 4 | ours |")))
    assert lines[i] == "| 4 | ours | 70.0 | 80.0 | - | 75.0 | 85.0 | - | 76.0 | 86.0 | - |"
    assert lines[i + 1] == "| | paper | 65.6 | 74.4 | 79.7 | 67.1 | 75.8 | 81.4 | 67.3 | 75.9 | 81.5 |"
    assert "| 8 | ours | - | - | - | - | - | - | - | - | - |" in lines  # n8-g0p0 is not at 20K yet
    assert "p@1 GRPO | p@1 γ=0.5 | p@1 γ=1 |" in text
    missing = (tmp_path / "r" / "missing.md").read_text()
    assert f"n8-g0p0 ({jobs['n8-g0p0'].job_name}): training not finished (step 5000 of 20000)" in missing
    assert "no validation at the last step (20000)" in missing and "the last one is at step 5000" in missing
    assert "- not started: 15 run(s), " in text
    rows = (tmp_path / "r" / "table4.csv").read_text().splitlines()
    assert rows[0] == "table,N,gamma,metric,ours,paper,step,run"
    assert "table4,4,0.5,pass@256,86.0000,75.9,20000,n4-g0p5" in rows
