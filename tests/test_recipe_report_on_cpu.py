"""`fgrpo-verl report RECIPE` (fgrpo_verl/report/): on an empty results tree it lists every run as missing and
exits 0; on constructed run directories whose answer is known it makes the protocol's choices (γ on the final
passes), puts our numbers beside the paper's, marks each paired test beside the number it tested and lists exactly
what is missing; the maze's Table 4 and Figs. 6-7 come from Slurm logs that requeues appended to."""

import json
import math
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
    from fgrpo_verl.report.build import build_report

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
# the selection pass's scores per γ and checkpoint, and each selected checkpoint's final pass: the rate of correct
# samples of problems 0-19 and of problems 20-39 (exact counts out of N). The selection pass picks γ = 1 (0.50 at
# its step 4 against γ = 0.5's 0.45 at step 2); the final passes say γ = 0.5 (pass@1 25 % against 17.5 %).
SEL = {0.0: {2: 0.30, 4: 0.40}, 0.5: {2: 0.45, 4: 0.35}, 1.0: {2: 0.42, 4: 0.50}}
FINAL = {0.0: (4, 0.30, 0.0), 0.5: (2, 0.45, 0.05), 1.0: (4, 0.35, 0.0)}
PROBLEMS, N = 40, 1024


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


def write_final(run: Path, step: int, label: str, first: float, second: float) -> dict:
    """A final result and its generations: PROBLEMS problems of N samples, round(rate x N) of them correct (rate
    ``first`` for the first half of the problems, ``second`` for the rest); returns its pass@k."""
    out = run / f"global_step_{step}" / ck.EVAL_DIR / label
    out.mkdir(parents=True, exist_ok=True)
    cs = [round((first if i < PROBLEMS // 2 else second) * N) for i in range(PROBLEMS)]
    (out / "generations.jsonl").write_text("".join(json.dumps(
        {"run": f"step{step}", "benchmark": "maze", "problem_id": str(i), "correct": [1] * c + [0] * (N - c)}) + "\n"
        for i, c in enumerate(cs)))
    ks = ks_up_to(N, 256)
    curve = {str(k): float(v) for k, v in zip(ks, pass_at_k_curve(np.full(PROBLEMS, N), np.array(cs), ks))}
    ck.write_json(out / ck.RESULT, {"step": step, "signature": ck.signature(run / f"global_step_{step}" / "actor"),
                                    "pass_at_k": {"maze": curve}, "generations": [str(out / "generations.jsonl")]})
    return curve


@pytest.fixture
def tiny(tmp_path):
    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.launch import plan_jobs
    from fgrpo_verl.job.run_record import write_record

    (tmp_path / "bench.jsonl").write_text('{"id": 1, "problem": "p", "answer": "a"}\n')
    path = recipe(tmp_path)
    _, jobs = plan_jobs(str(path), None, [], tmp_path / "logs", tmp_path)
    runs, finals = {}, {}
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
        finals[gamma] = write_final(run, FINAL[gamma][0], runs[gamma][1], *FINAL[gamma][1:])
    return tmp_path, path, runs, finals


def cell(curve: dict, marks: str = "/") -> str:
    """Table 1's cell of a final pass: pass@1/pass@256 in %, ``marks`` the text between and after the numbers."""
    first, second = marks.split("/")
    return f"{100 * curve['1']:.1f}{first}/{100 * curve['256']:.1f}{second}"


def test_report_makes_the_protocols_choices_and_marks_each_test_beside_its_number(tiny):
    from fgrpo_verl.report.build import build_report

    root, path, runs, finals = tiny
    text = build_report(str(path), root, root / "r", (500, "paper", 0))
    selection = {row.split(",")[0]: row.split(",")[4] for row in (root / "r" / "selection.csv").read_text().splitlines()[1:]}
    assert selection == {"g0.0": "4", "g0.5": "2", "g1.0": "4"}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if " | ours | " in line}
    # γ on the final passes (0.5), not on the selection pass (which ranks γ = 1 first)
    assert set(rows) == {"model GRPO", "model F-GRPO (γ=0.5)", "GRPO γ=0", "GRPO γ=0.5", "GRPO γ=1"}
    # pass@1 25.0 against 15.0 and pass@256 100.0 against 50.0 on 40 problems: each number carries its own test
    assert f"| {cell(finals[0.5], '*/*')} |" in rows["model F-GRPO (γ=0.5)"]
    assert f"| {cell(finals[0.0])} |" in rows["model GRPO"]
    assert "pass@1/pass@256 (%)" in text and "nothing: every run is finished and evaluated" in text
    table1 = (root / "r" / "table1.md").read_text()
    assert cell(finals[0.5], "*/*") in table1 and "`*` after a number: the focal run's paired difference" in table1
    assert "m = 256 = n/4, 500 iterations" in table1 and "not tested" not in table1
    sig = {(r.split(",")[2], r.split(",")[3]): r for r in (root / "r" / "significance.csv").read_text().splitlines()[1:]}
    assert set(sig) == {("maze", "1"), ("maze", "256")} and all(",True" in r for r in sig.values())
    marked = [line.split(",") for line in (root / "r" / "table1.csv").read_text().splitlines() if "F-GRPO" in line]
    assert {(r[3], r[-1]) for r in marked} == {("pass@1", "yes"), ("pass@256", "yes")}
    # Table 6: every γ at its own selected checkpoint
    assert cell(finals[1.0]) in rows["GRPO γ=1"]
    # the model is not the paper's: no paper numbers, no invented ones
    assert all(cell.strip() in ("-/-", "") for line in text.splitlines() if line.startswith("| | paper")
               for cell in line.split("|")[3:-1])
    assert (root / "r" / "curves" / "model-grpo" / "pass_at_k_maze.png").is_file()


def test_gamma_falls_back_to_the_selection_pass_where_the_final_pass_has_not_the_protocols_score(tiny):
    from fgrpo_verl.report.build import build_report

    root, path, runs, _ = tiny
    for gamma, (run, label) in runs.items():  # final passes over another benchmark only
        result = ck.result_path(run, FINAL[gamma][0], label)
        data = json.loads(result.read_text())
        ck.write_json(result, {**data, "pass_at_k": {"other": data["pass_at_k"]["maze"]}})
    build_report(str(path), root, root / "r", None)
    table1 = (root / "r" / "table1.md").read_text()
    assert "| model F-GRPO (γ=1) | ours |" in table1  # the selection pass ranks γ = 1 first
    assert "maze pass@1 in its selection pass (n=4; the final pass has no maze)" in table1


def test_a_mark_sits_beside_the_pass_at_k_it_tested_and_an_untested_k_is_said():
    from fgrpo_verl.report.tables import Table

    table = Table("table1", "T", ["Math Avg"], [("F", {"Math Avg": (38.6, 70.3)}, {}, {"Math Avg": {1: False, 256: True}}),
                                                ("G", {"Math Avg": (39.0, 71.0)}, {}, {"Math Avg": {1: True}})], "Table 1")
    md = table.markdown(256)
    assert "| F | ours | 38.6/70.3* |" in md and "| G | ours | 39.0*/71.0 |" in md
    csv_rows = {(r["row"], r["metric"]): r["significant"] for r in table.csv_rows(256)}
    assert csv_rows == {("F", "pass@1"): "no", ("F", "pass@256"): "yes", ("G", "pass@1"): "yes", ("G", "pass@256"): ""}


def test_report_lists_what_is_missing_instead_of_dropping_it(tiny):
    from fgrpo_verl.report.build import build_report

    root, path, runs, _ = tiny
    run, label = runs[0.5]
    (ck.result_path(run, 2, label)).unlink()
    other, _ = runs[1.0]
    (other / "global_step_4" / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"retrained")  # stale result
    text = build_report(str(path), root, root / "r", None)
    missing = (root / "r" / "missing.md").read_text()
    assert "g0.5" in missing and f"final pass (n={N}) of the selected checkpoint 2 not evaluated" in missing
    assert "g1.0" in missing and "selection pass: checkpoints [4] not evaluated" in missing
    assert "γ not chosen yet (γ=0.5, γ=1 without a final pass at a selected checkpoint)" in text
    assert "significance" not in text.split("### Missing")[0].lower().replace("significance.csv", "")


def controls_with_ds_grpo(tmp_path: Path) -> Path:
    """The shipped controls recipe with a DS-GRPO run (``variant: ds_grpo``) if it has none; its ``data.seed`` only
    makes its config differ from the GRPO run's (a recipe refuses two runs of one config)."""
    data = yaml.safe_load((REPO / "recipes" / "controls.yaml").read_text())
    if not any(run.get("variant") == "ds_grpo" for run in data["runs"]):
        data["runs"].append({"name": "ds-grpo", "group": "qwen25_7b-controls", "variant": "ds_grpo",
                             "overrides": ["algo=grpo", "algorithm.fgrpo.gamma=0.0", "data.seed=7"]})
    path = tmp_path / "controls.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


@pytest.mark.timeout(600)
@pytest.mark.parametrize("recipe_name, rows", [
    ("group_size", {"GRPO N=2": "36.2/75.0", "GRPO N=32": "39.2/70.1", "F-GRPO N=8": "38.6/70.3"}),
    ("controls", {"GRPO low-LR (6.8e-7)": "37.8/69.2", "GRPO-H (entropy 1e-3)": "37.8/69.5",
                  "GRPO-KL (1e-3)": "37.2/72.0", "DS-GRPO (Gai et al. 2025)": "37.7/73.8",
                  "F-GRPO (γ=0.5)": "38.6/70.3"}),
])
def test_tables_2_and_3_label_each_run_as_the_papers_row_it_reproduces(tmp_path, recipe_name, rows):
    from fgrpo_verl.report.build import build_report

    recipe_arg = str(controls_with_ds_grpo(tmp_path)) if recipe_name == "controls" else recipe_name
    build_report(recipe_arg, tmp_path, tmp_path / "r", None)
    # no run has results here: the table is in its file, not printed
    text = (tmp_path / "r" / ("table2.md" if recipe_name == "group_size" else "table3.md")).read_text()
    lines = text.splitlines()
    for label, paper in rows.items():
        i = lines.index(next(line for line in lines if line.startswith(f"| {label} | ours |")))
        assert lines[i + 1].startswith(f"| | paper | {paper} |"), (label, lines[i + 1])
    if recipe_name == "group_size":
        assert "ΔNLL_rare" in text


def test_the_significance_test_scores_unscored_lines_with_each_benchmarks_own_scorer(tmp_path, monkeypatch):
    """GPQA's unscored lines are scored with its ``boxed`` scorer (math-verify would also accept ``\\boxed{b}``
    for B); SynLogic, whose scorer is not set here, is left out with a line naming it; scored lines keep theirs."""
    from fgrpo_verl.evaluation.plan import BenchmarkFile
    from fgrpo_verl.evaluation.report import scored_counts

    monkeypatch.delenv("FGRPO_SYNLOGIC_SCORER", raising=False)
    lines = [{"run": "r", "benchmark": "GPQA", "problem_id": "1", "answer": "B",
              "completions": ["\\boxed{B}", "\\boxed{b}", "no answer"]},
             {"run": "r", "benchmark": "SynLogic", "problem_id": "1", "answer": "x", "completions": ["x", "y", "z"]},
             {"run": "r", "benchmark": "AIME24", "problem_id": "1", "correct": [1, 1, 0]}]
    gen = tmp_path / "generations.jsonl"
    gen.write_text("".join(json.dumps(line) + "\n" for line in lines))
    benches = {name: BenchmarkFile(file=str(tmp_path / f"{name}.jsonl"), scorer=scorer, group=group)
               for name, scorer, group in (("GPQA", "boxed", "ood"), ("SynLogic", "${FGRPO_SYNLOGIC_SCORER}", "ood"),
                                           ("AIME24", "math", "math"))}
    counts, skipped = scored_counts({"generations": [str(gen)]}, benches, 1.0)
    assert sorted(counts) == ["AIME24", "GPQA"]
    assert counts["GPQA"].c.tolist() == [1] and counts["AIME24"].c.tolist() == [2]
    assert skipped == ["SynLogic: its scorer ${FGRPO_SYNLOGIC_SCORER} is not set here: "
                       "export FGRPO_SYNLOGIC_SCORER=module:function"]


def _line(step: int, reward: float | None, p: tuple = ()) -> str:
    """verl's console step line as Ray forwards it: the train reward (None: a validation-only line, as before
    training), and with ``p`` the validation's pass@k for k = 1, 128, 256, 1024, 2048."""
    train = "" if reward is None else f" - actor/pg_loss:0.01 - critic/score/mean:{reward}"
    val = "".join(f" - val-core/maze/pass@{k}:{v}" for k, v in zip((1, 128, 256, 1024, 2048), p))
    return f"(TaskRunner pid=7) step:{step}{train}{val}\n"


@pytest.mark.timeout(600)
def test_report_maze_reads_table_4_and_figs_6_7_from_slurm_logs_that_requeues_appended_to(tmp_path):
    """The maze recipe has no evaluation block: its runs validate every 1,000 steps (n = 2048) and verl prints
    val-core/maze/pass@k on its step lines into the Slurm logs, which launch opens for appending. A requeue appends
    to the same job id's log and a resubmission writes another job id's; a restart logs the steps after its
    checkpoint again, and what a killed start logged past it (step 1500 here) is not part of the run."""
    from fgrpo_verl.launch import plan_jobs
    from fgrpo_verl.launch.render import sbatch_unquote
    from fgrpo_verl.report.build import build_report

    logs = tmp_path / "slurm_logs"
    _, jobs = plan_jobs("maze", None, [], logs, tmp_path, check=False)
    jobs = {job.run.name: job for job in jobs}
    # the report's source is what launch writes: one log per job id, appended to across requeues
    sbatch = dict(line.removeprefix("#SBATCH --").partition("=")[::2] for line in jobs["n4-g0p0"].text.splitlines()
                  if line.startswith("#SBATCH --"))
    assert sbatch_unquote(sbatch["open-mode"]) == "append" and "requeue" in sbatch
    assert sbatch_unquote(sbatch["output"]) == f"{logs}/%x-%j.out"  # %x: the job name the report globs for
    logs.mkdir()
    final = {"n4-g0p0": (0.70, 0.75, 0.76, 0.77, 0.78), "n4-g0p5": (0.80, 0.85, 0.86, 0.87, 0.88)}
    for name, last in {"n4-g0p0": 20000, "n4-g0p5": 20000, "n8-g0p0": 5000}.items():
        job = jobs[name]
        job.checkpoint_dir.mkdir(parents=True)
        (job.checkpoint_dir / "latest_checkpointed_iteration.txt").write_text(str(last))
        first = (_line(0, None, (0.1, 0.2, 0.3, 0.3, 0.3)) + _line(1000, 0.3, (0.2, 0.3, 0.4, 0.4, 0.4))
                 + _line(1500, 0.9)  # killed after this step: the requeued start resumes from checkpoint 1000
                 + "[fgrpo] job 998 run x start 1 (0 = first start) on node0\n"
                 + _line(1001, 0.4) + _line(2000, 0.5, (0.3, 0.4, 0.5, 0.5, 0.5)))
        (logs / f"{job.job_name}-998.out").write_text(first)
        # resubmitted (a new job id, which sorts before 998 as text), resumed from 2000
        p_last = final.get(name, (0.60, 0.65, 0.66, 0.67, 0.68))
        (logs / f"{job.job_name}-1002.out").write_text(_line(2001, 0.6) + _line(last, 0.7, p_last) + "".join(
            f"(TaskRunner pid=7) step:{last} - timing_s/save:1.0\n" for _ in range(3)))
    text = build_report("maze", tmp_path, tmp_path / "r", None)
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
    # Fig. 6: -log pass@K at the last step of the runs that reached it, K = 1, 128, 1024, 2048
    fig6 = [line.split(",") for line in (tmp_path / "r" / "fig6.csv").read_text().splitlines()]
    assert fig6[0] == ["N", "gamma", "k", "pass_at_k", "neg_log"]
    assert {(r[0], r[1], r[2]) for r in fig6[1:]} == {("4", g, k) for g in ("0.0", "0.5") for k in ("1", "128", "1024", "2048")}
    assert math.isclose(float(next(r for r in fig6 if r[1:3] == ["0.5", "2048"])[4]), -math.log(0.88))
    # Fig. 7: the run's trajectory over every start, in job id order, without the killed start's step 1500
    fig7 = [line.split(",") for line in (tmp_path / "r" / "fig7.csv").read_text().splitlines()]
    assert fig7[0] == ["run", "N", "gamma", "step", "train reward", "test pass@1", "test pass@2048"]
    assert [(r[3], r[4], r[5]) for r in fig7 if r[0] == "n4-g0p0"] == [
        ("0", "", "0.1"), ("1000", "0.3", "0.2"), ("1001", "0.4", ""), ("2000", "0.5", "0.3"), ("2001", "0.6", ""),
        ("20000", "0.7", "0.7")]
    assert (tmp_path / "r" / "fig6.png").stat().st_size > 0 and (tmp_path / "r" / "fig7.png").stat().st_size > 0
    assert "Figs. 6-7 (data source maze): fig6.png, fig6.csv, fig7.png, fig7.csv" in text
