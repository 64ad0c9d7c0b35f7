"""fgrpo-verl eval --from-generations on a generated fixture: hand-checked pass@k, tables, plots, significance."""

import csv
import io
import json

import numpy as np
import pytest

from fgrpo_verl.cli import main
from fgrpo_verl.evaluation.significance import subsample_draws, summarise

# Hand-checked values (n = 4):
#   c=1: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1 - 3/6 = 1/2, pass@4 = 1
#   c=2: pass@1 = 1/2, pass@2 = 1 - C(2,2)/C(4,2) = 5/6,        pass@4 = 1
#   c=0: all 0
FIXTURE = [
    {"run": "GRPO", "benchmark": "X", "problem_id": "p1", "correct": [1, 0, 0, 0]},
    {"run": "GRPO", "benchmark": "X", "problem_id": "p2", "correct": [1, 1, 0, 0]},
    {"run": "GRPO", "benchmark": "X", "problem_id": "p3", "correct": [0, 0, 0, 0]},
    {"run": "F-GRPO", "benchmark": "X", "problem_id": "p1", "correct": [True, True, False, False]},
    {"run": "F-GRPO", "benchmark": "X", "problem_id": "p2", "correct": [0, 0, 0, 1]},
    {"run": "F-GRPO", "benchmark": "X", "problem_id": "p3", "correct": [0, 1, 0, 0]},
    # completions scored on load with the math-verify scorer: GRPO 2/4 correct, F-GRPO 1/4
    {"run": "GRPO", "benchmark": "Y", "problem_id": 7, "answer": "\\frac{1}{2}",
     "completions": ["so \\boxed{0.5}", "\\boxed{1}", "no idea", "\\boxed{\\frac12}"]},
    {"run": "F-GRPO", "benchmark": "Y", "problem_id": 7, "answer": "\\frac{1}{2}",
     "completions": ["\\boxed{2}", "\\boxed{1}", "no idea", "\\boxed{\\frac{1}{2}}"]},
]
WANT = {  # (run, benchmark, k) -> pass@k
    ("GRPO", "X", 1): (1 / 4 + 1 / 2 + 0) / 3, ("GRPO", "X", 2): (1 / 2 + 5 / 6 + 0) / 3, ("GRPO", "X", 4): 2 / 3,
    ("F-GRPO", "X", 1): (1 / 2 + 1 / 4 + 1 / 4) / 3, ("F-GRPO", "X", 2): (5 / 6 + 1 / 2 + 1 / 2) / 3,
    ("F-GRPO", "X", 4): 1.0,
    ("GRPO", "Y", 1): 1 / 2, ("GRPO", "Y", 2): 5 / 6, ("GRPO", "Y", 4): 1.0,
    ("F-GRPO", "Y", 1): 1 / 4, ("F-GRPO", "Y", 2): 1 / 2, ("F-GRPO", "Y", 4): 1.0,
}


def _write(path, lines):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_from_generations_reproduces_hand_checked_values(tmp_path, capsys):
    gen = _write(tmp_path / "gen.jsonl", FIXTURE)
    out = tmp_path / "out"
    rc = main(["eval", "--from-generations", str(gen), "--out", str(out), "--runs", "GRPO,F-GRPO",
               "--average", "Avg=X,Y"])
    assert rc == 0

    with (out / "pass_at_k_long.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    got = {(r["run"], r["benchmark"], int(r["k"])): float(r["pass_at_k"]) for r in rows}
    for key, want in WANT.items():
        assert got[key] == pytest.approx(want, abs=1e-12), key
    for run in ("GRPO", "F-GRPO"):
        for k in (1, 2, 4):
            assert got[(run, "Avg", k)] == pytest.approx((WANT[(run, "X", k)] + WANT[(run, "Y", k)]) / 2, abs=1e-12)
    assert sorted({k for (_, _, k) in got}) == [1, 2, 4]  # capped at n = 4

    md = (out / "pass_at_k.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[0] == "| k | X | Y | Avg |"
    # k = 2 row, X column: GRPO 44.4 / F-GRPO 61.1 (%), Y: 83.3/50.0
    assert table[2].startswith("| 2 | 44.4/61.1 | 83.3/50.0 |")
    assert "cells: GRPO/F-GRPO" in md

    with (out / "pass_at_k_table.csv").open() as fh:
        wide = list(csv.reader(fh))
    assert wide[0] == ["k", "X/GRPO", "X/F-GRPO", "Y/GRPO", "Y/F-GRPO", "Avg/GRPO", "Avg/F-GRPO"]
    assert [int(r[0]) for r in wide[1:]] == [1, 2, 4]
    assert float(wide[1][1]) == pytest.approx(100 * WANT[("GRPO", "X", 1)], abs=1e-3)

    for name in ("X", "Y", "Avg", "all"):
        png = out / "plots" / f"pass_at_k_{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert "| 2 | 44.4/61.1" in capsys.readouterr().out


def test_run_order_defaults_to_appearance_and_k_max_caps(tmp_path):
    gen = _write(tmp_path / "gen.jsonl", FIXTURE[:6])
    rc = main(["eval", "--from-generations", str(gen), "--out", str(tmp_path / "o"), "--k-max", "2", "--no-plots"])
    assert rc == 0
    md = (tmp_path / "o" / "pass_at_k.md").read_text()
    assert "cells: GRPO/F-GRPO" in md and "| 4 |" not in md and not (tmp_path / "o" / "plots").exists()


def test_completions_without_answer_are_scored_from_the_benchmark_file(tmp_path):
    bench = _write(tmp_path / "b.jsonl", [{"id": 7, "problem": "1/2?", "answer": "\\frac{1}{2}"}])
    lines = [{k: v for k, v in line.items() if k != "answer"} for line in FIXTURE[6:]]
    gen = _write(tmp_path / "gen.jsonl", lines)
    out = tmp_path / "o"
    assert main(["eval", "--from-generations", str(gen), "--bench", f"Y={bench}", "--out", str(out), "--no-plots"]) == 0
    rows = list(csv.DictReader((out / "pass_at_k_long.csv").open()))
    assert float(rows[0]["pass_at_k"]) == pytest.approx(0.5)  # GRPO pass@1 on Y


def test_custom_scorer_module_function(tmp_path):
    import sys
    import types

    mod = types.ModuleType("my_eval_scorer")
    mod.score = lambda data_source, solution_str, ground_truth, extra_info=None: {"score": float(solution_str == "yes")}
    sys.modules["my_eval_scorer"] = mod
    try:
        gen = _write(tmp_path / "g.jsonl", [{"run": "A", "benchmark": "B", "problem_id": 0, "answer": "-",
                                             "completions": ["yes", "no", "yes", "no"]}])
        out = tmp_path / "o"
        assert main(["eval", "--from-generations", str(gen), "--scorer", "my_eval_scorer:score", "--out", str(out),
                     "--no-plots"]) == 0
        rows = list(csv.DictReader((out / "pass_at_k_long.csv").open()))
        assert [float(r["pass_at_k"]) for r in rows] == pytest.approx([0.5, 5 / 6, 1.0])
    finally:
        del sys.modules["my_eval_scorer"]


@pytest.mark.parametrize(
    "line,match",
    [
        ({"run": "A", "benchmark": "B", "problem_id": 1, "correct": [1, 2]}, "'correct' entries must be 0/1"),
        ({"run": "A", "benchmark": "B", "problem_id": 1}, "needs 'correct'"),
        ({"run": "", "benchmark": "B", "problem_id": 1, "correct": [1]}, "'run' must be a non-empty string"),
        ({"run": "A", "benchmark": "B", "problem_id": 1, "completions": ["x"]}, "no 'answer'"),
    ],
)
def test_bad_generation_lines_are_rejected(tmp_path, capsys, line, match):
    gen = _write(tmp_path / "g.jsonl", [line])
    assert main(["eval", "--from-generations", str(gen), "--out", str(tmp_path / "o")]) == 2
    assert match in capsys.readouterr().err


def test_duplicate_problem_lines_are_rejected(tmp_path, capsys):
    gen = _write(tmp_path / "g.jsonl", [FIXTURE[0], FIXTURE[0]])
    assert main(["eval", "--from-generations", str(gen), "--out", str(tmp_path / "o")]) == 2
    assert "duplicate" in capsys.readouterr().err


def _runs(rng, problems, n, p):
    return np.full(problems, n), rng.binomial(n, p, size=problems)


def test_significance_detects_a_real_difference():
    rng = np.random.default_rng(0)
    base_rate = rng.uniform(0.05, 0.6, size=60)
    nb, cb = _runs(rng, 60, 1024, base_rate)
    nf, cf = _runs(rng, 60, 1024, np.minimum(base_rate + 0.08, 1.0))
    rows = summarise(subsample_draws(nb, cb, nf, cf, ks=[1, 4], m=256, iterations=2000, seed=1))
    for r in rows:
        assert r.significant and r.ci_low > 0 and r.difference > 0 and r.p_value < 0.05
        assert r.ci_low < r.difference < r.ci_high


def test_significance_does_not_flag_identical_runs():
    rng = np.random.default_rng(2)
    n, c = _runs(rng, 40, 1024, rng.uniform(0.01, 0.9, size=40))
    rows = summarise(subsample_draws(n, c, n, c, ks=[1, 2, 16, 256], m=256, iterations=2000, seed=3))
    for r in rows:
        assert r.difference == 0.0 and not r.significant and r.ci_low <= 0 <= r.ci_high


def test_significance_is_seeded_and_validates():
    rng = np.random.default_rng(4)
    n, c = _runs(rng, 10, 64, 0.3)
    cf = rng.binomial(64, 0.35, size=10)
    a = summarise(subsample_draws(n, c, n, cf, ks=[1, 8], m=16, iterations=500, seed=5))
    b = summarise(subsample_draws(n, c, n, cf, ks=[1, 8], m=16, iterations=500, seed=5))
    other = summarise(subsample_draws(n, c, n, cf, ks=[1, 8], m=16, iterations=500, seed=6))
    assert a == b and [r.ci_low for r in a] != [r.ci_low for r in other]
    with pytest.raises(ValueError, match="m must be < the number of generations"):
        subsample_draws(n, c, n, c, m=64, iterations=10)
    with pytest.raises(ValueError, match=r"k must be <= n \(the estimator is unbiased only for k <= n\), got k=32"):
        subsample_draws(n, c, n, c, ks=[32], m=16, iterations=10)
    with pytest.raises(ValueError, match="same problems"):
        subsample_draws(n, c, n[:5], c[:5], m=16, iterations=10)


def test_cli_significance_writes_report_and_marks_cells(tmp_path):
    rng = np.random.default_rng(6)
    lines = []
    for i in range(30):
        p = rng.uniform(0.05, 0.4)
        lines.append({"run": "base", "benchmark": "B", "problem_id": i, "correct": rng.binomial(1, p, 64).tolist()})
        lines.append({"run": "focal", "benchmark": "B", "problem_id": i, "correct": rng.binomial(1, min(1, p + 0.3), 64).tolist()})
    gen = _write(tmp_path / "g.jsonl", lines)
    out = tmp_path / "o"
    assert main(["eval", "--from-generations", str(gen), "--out", str(out), "--no-plots", "--significance", "base:focal",
                 "--significance-m", "16", "--significance-iterations", "1000"]) == 0
    sig = list(csv.DictReader((out / "significance.csv").open()))
    assert [int(r["k"]) for r in sig] == [1, 2, 4, 8, 16]
    assert sig[0]["significant"] == "True" and float(sig[0]["ci_low"]) > 0
    row1 = [line for line in (out / "pass_at_k.md").read_text().splitlines() if line.startswith("| 1 |")][0]
    assert row1.split("|")[2].strip().endswith("*")  # focal cell of column B marked significant
    assert (out / "significance.md").read_text().count("| base | focal | B |") == 5


def test_maze_scorer_on_verl_parquet_rows(tmp_path):
    """The maze task's own checker scores completions against its verl-format held-out parquet."""
    from fgrpo_verl.tasks.maze.data import write_parquet
    from fgrpo_verl.tasks.maze.generator import generate_maze

    mazes = [generate_maze(7, seed) for seed in range(3)]
    bench = write_parquet(mazes, "val", tmp_path / "val.parquet")
    # sample j of maze i is the exact path iff j < i + 1, else the path with one extra move appended
    lines = [{"run": "sft", "benchmark": "maze", "problem_id": i,
              "completions": [m.path if j <= i else m.path + "U" for j in range(4)]} for i, m in enumerate(mazes)]
    gen = _write(tmp_path / "g.jsonl", lines)
    out = tmp_path / "o"
    assert main(["eval", "--from-generations", str(gen), "--bench", f"maze={bench}", "--scorer", "maze",
                 "--out", str(out), "--no-plots"]) == 0
    rows = {int(r["k"]): float(r["pass_at_k"]) for r in csv.DictReader((out / "pass_at_k_long.csv").open())}
    assert rows[1] == pytest.approx((1 + 2 + 3) / 12)
    assert rows[2] == pytest.approx(((1 - 3 / 6) + (1 - 1 / 6) + 1) / 3)


def test_parallel_scoring_matches_serial(tmp_path):
    rng = np.random.default_rng(8)
    lines = []
    for i in range(12):
        answer = int(rng.integers(1, 50))
        texts = [f"so \\boxed{{{answer if rng.random() < 0.4 else answer + 1}}}" for _ in range(6)]
        lines.append({"run": "A", "benchmark": "M", "problem_id": i, "answer": str(answer), "completions": texts})
    gen = _write(tmp_path / "g.jsonl", lines)
    tables = []
    for workers in ("1", "2"):
        out = tmp_path / f"o{workers}"
        assert main(["eval", "--from-generations", str(gen), "--score-workers", workers, "--out", str(out), "--no-plots"]) == 0
        tables.append((out / "pass_at_k_long.csv").read_text())
    assert tables[0] == tables[1]
    want = np.mean([sum(t == f"so \\boxed{{{line['answer']}}}" for t in line["completions"]) / 6 for line in lines])
    first = next(csv.DictReader(io.StringIO(tables[0])))
    assert float(first["pass_at_k"]) == pytest.approx(want)


# ---- honest tables and calibrated significance -----------------------------------------------------------------
from fgrpo_verl.evaluation.significance import combine_draws, interval  # noqa: E402


def _null_rejection_rates(**kwargs):
    """benchmarks/significance_calibration.py's null simulation (a measurement script, not in the package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "significance_calibration.py"
    spec = importlib.util.spec_from_file_location("significance_calibration", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.null_rejection_rates(**kwargs)


def test_null_type_one_error_bands():
    """H0 (same per-problem rates in both runs), 300 replicates x 2 benchmarks (+ their average), seeded.

    Bands (docs/evaluation.md has the 1,000-replicate numbers at paper scale): rescaled-fpc within [2.5%, 8%] per
    benchmark and [2%, 9%] for the average; rescaled (sqrt(m/n)) is anti-conservative at m/n = 1/4, [5%, 13%];
    the paper's raw percentiles almost never reject (<= 1.5%)."""
    rates = _null_rejection_rates(replicates=300, benchmarks=2, problems=40, n=256, m=64, iterations=400, ks=(1,),
                                  seed=1)
    assert 0.025 <= rates["rescaled-fpc"]["k=1"] <= 0.08
    assert 0.02 <= rates["rescaled-fpc"]["avg k=1"] <= 0.09
    assert 0.05 <= rates["rescaled"]["k=1"] <= 0.13
    assert rates["paper"]["k=1"] <= 0.015 and rates["paper"]["avg k=1"] <= 0.015
    # same draws, nested intervals: sqrt(m/n) < sqrt(m/(n-m)) < 1 (raw), so rejections are nested too
    assert rates["rescaled"]["k=1"] >= rates["rescaled-fpc"]["k=1"] >= rates["paper"]["k=1"]


def test_rescaled_interval_formula():
    diffs = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    low, high, p = interval(diffs, 0.2, 0.5, "rescaled", m=25, n=100)  # s = 1/2; deviations -0.2..0.2 -> quartiles +-0.1
    assert (low, high) == pytest.approx((0.2 - 0.05, 0.2 + 0.05))
    low_f, high_f, _ = interval(diffs, 0.2, 0.5, "rescaled-fpc", m=25, n=100)  # s = sqrt(25/75)
    assert high_f - low_f == pytest.approx(np.sqrt(1 / 3) * 0.2)
    assert p == pytest.approx(0.0)  # s * dev never reaches the estimate 0.2
    with pytest.raises(ValueError, match="one number of samples"):
        interval(diffs, 0.2, 0.5, "rescaled", m=25, n=0)
    with pytest.raises(ValueError, match="must be one of"):
        interval(diffs, 0.2, 0.5, "bootstrap", m=25, n=100)


def test_average_column_uses_the_same_iteration_of_every_benchmark():
    rng = np.random.default_rng(2)
    parts = []
    for shift in (0.06, 0.06):
        p = rng.uniform(0.2, 0.6, 40)
        n = np.full(40, 64)
        parts.append(subsample_draws(n, rng.binomial(64, p), n, rng.binomial(64, np.clip(p + shift, 0, 1)), ks=[1],
                                     m=16, iterations=3000, seed=int(rng.integers(1 << 30))))
    avg = combine_draws(parts)
    np.testing.assert_array_equal(avg.diffs[1], (parts[0].diffs[1] + parts[1].diffs[1]) / 2)
    assert avg.focal[1] - avg.baseline[1] == pytest.approx(np.mean([p.focal[1] - p.baseline[1] for p in parts]))
    # two independent benchmarks: the average's spread is ~1/sqrt(2) of a member's
    ratio = avg.diffs[1].std() / np.mean([p.diffs[1].std() for p in parts])
    assert 0.6 < ratio < 0.82
    rows = summarise(avg, method="rescaled-fpc")
    assert rows[0].ci_high - rows[0].ci_low < min(r.ci_high - r.ci_low for p in parts for r in summarise(p, method="rescaled-fpc"))


def test_cli_tests_average_columns(tmp_path):
    rng = np.random.default_rng(6)
    lines = []
    for bench in ("X", "Y"):
        for i in range(30):
            p = rng.uniform(0.05, 0.4)
            lines.append({"run": "base", "benchmark": bench, "problem_id": i, "correct": rng.binomial(1, p, 64).tolist()})
            lines.append({"run": "focal", "benchmark": bench, "problem_id": i,
                          "correct": rng.binomial(1, min(1, p + 0.3), 64).tolist()})
    gen = _write(tmp_path / "g.jsonl", lines)
    out = tmp_path / "o"
    assert main(["eval", "--from-generations", str(gen), "--out", str(out), "--no-plots", "--significance", "base:focal",
                 "--average", "Avg=X,Y", "--significance-m", "16", "--significance-iterations", "500",
                 "--significance-method", "rescaled-fpc"]) == 0
    sig = list(csv.DictReader((out / "significance.csv").open()))
    assert {r["benchmark"] for r in sig} == {"X", "Y", "Avg"}
    assert {r["method"] for r in sig} == {"rescaled-fpc"}
    avg1 = next(r for r in sig if r["benchmark"] == "Avg" and r["k"] == "1")
    xy1 = [float(r["difference"]) for r in sig if r["benchmark"] in "XY" and r["k"] == "1"]
    assert float(avg1["difference"]) == pytest.approx(np.mean(xy1)) and avg1["significant"] == "True"
    row1 = [line for line in (out / "pass_at_k.md").read_text().splitlines() if line.startswith("| 1 |")][0]
    assert row1.split("|")[4].strip().endswith("*")  # the Avg column's focal cell


def test_runs_on_different_problem_sets_are_refused(tmp_path, capsys):
    lines = [{"run": "A", "benchmark": "X", "problem_id": i, "correct": [1, 0]} for i in range(5)]
    lines += [{"run": "B", "benchmark": "X", "problem_id": i, "correct": [0, 0]} for i in range(1, 7)]
    gen = _write(tmp_path / "g.jsonl", lines)
    assert main(["eval", "--from-generations", str(gen), "--out", str(tmp_path / "o"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "not evaluated on the same problems" in err
    assert "run 'A' lacks 2 of 7 problems, e.g. ['5', '6']" in err and "run 'B' lacks 1 of 7 problems, e.g. ['0']" in err


@pytest.mark.parametrize("flags", [["--scorer", "mathh"], ["--bench-scorer", "X=mathh"], ["--bench-scorer", "Z=boxed"]])
def test_unknown_scorers_are_rejected_with_saved_correctness(tmp_path, capsys, flags):
    """Even when nothing needs scoring (every line has 'correct'), a bad scorer option is an error."""
    gen = _write(tmp_path / "g.jsonl", FIXTURE[:6])
    assert main(["eval", "--from-generations", str(gen), "--out", str(tmp_path / "o"), "--no-plots", *flags]) == 2
    err = capsys.readouterr().err
    assert ("neither a built-in" in err) or ("not in the generations: ['Z']" in err)


def test_two_line_problems_merge_and_a_third_line_is_a_duplicate(tmp_path, capsys):
    texts = {"run": "A", "benchmark": "X", "problem_id": 0, "answer": "1", "completions": ["\\boxed{1}", "\\boxed{2}"]}
    scored = {"run": "A", "benchmark": "X", "problem_id": 0, "correct": [0, 0]}  # deliberately not what scoring gives
    gen = _write(tmp_path / "g.jsonl", [texts, scored])
    out = tmp_path / "o"
    assert main(["eval", "--from-generations", str(gen), "--scorer", "boxed", "--out", str(out), "--no-plots"]) == 0
    assert float(next(csv.DictReader((out / "pass_at_k_long.csv").open()))["pass_at_k"]) == 0.0  # the saved line wins
    assert main(["eval", "--from-generations", str(gen), "--scorer", "boxed", "--rescore", "--out", str(out), "--no-plots"]) == 0
    assert float(next(csv.DictReader((out / "pass_at_k_long.csv").open()))["pass_at_k"]) == 0.5
    gen = _write(tmp_path / "g3.jsonl", [texts, scored, scored])
    assert main(["eval", "--from-generations", str(gen), "--out", str(out), "--no-plots"]) == 2
    assert "duplicate" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--threshold", "--temperature"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_threshold_and_temperature_are_rejected(tmp_path, capsys, option, value):
    """score >= nan is never true (every sample silently incorrect), >= -inf always; a NaN temperature passed the
    "<= 0" check. Refuse both, naming the option."""
    gen = _write(tmp_path / "g.jsonl", FIXTURE[6:])
    assert main(["eval", "--from-generations", str(gen), f"{option}={value}", "--out", str(tmp_path / "o"), "--no-plots"]) == 2
    assert f"{option} must be a finite number" in capsys.readouterr().err


def test_a_bad_option_is_one_line_and_exit_2_and_debug_shows_the_traceback(tmp_path, capsys):
    """eval raises and leaves the line and the exit status to fgrpo_verl/cli/errors.py."""
    argv = ["eval", "--model", "A=a", "--out", str(tmp_path / "o"), "--n", "0"]
    assert main(argv) == 2
    assert capsys.readouterr().err == "fgrpo-verl eval: error: --n must be >= 1, got 0\n"
    with pytest.raises(ValueError, match="--n must be >= 1"):
        main(["--debug", *argv])


@pytest.mark.parametrize("missing, line", [
    ("vllm", "--backend vllm (the default) needs vLLM, which is not installed here: on a GPU machine pip install "
             "'fgrpo-verl[gpu]'; on CPU use --backend transformers"),
    ("some_dependency", "No module named 'some_dependency'"),
])
def test_a_missing_module_is_one_line_and_exit_1(missing, line, tmp_path, monkeypatch, capsys):
    """A missing vLLM is named with the two ways out; any other missing module as Python names it."""
    import fgrpo_verl.evaluation.pipeline as pipeline

    def run_eval(args):
        raise ModuleNotFoundError(f"No module named '{missing}'", name=missing)

    monkeypatch.setattr(pipeline, "run_eval", run_eval)
    gen = _write(tmp_path / "g.jsonl", FIXTURE[:6])
    assert main(["eval", "--from-generations", str(gen), "--out", str(tmp_path / "o"), "--no-plots"]) == 1
    assert capsys.readouterr().err == f"fgrpo-verl eval: error: {line}\n"
