"""``fgrpo-verl tail-miss`` and ``fgrpo-verl simulate``: output formats, agreement with the library, bad input."""

import json
import subprocess
import sys

import pytest

from fgrpo_verl.cli import main
from fgrpo_verl.theory import active_probability, tail_miss_probability


def test_tail_miss_json_matches_library(capsys):
    assert main(["tail-miss", "--mu", "0.5", "0.64", "--tau", "0.05", "--n", "2", "8", "131072", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 6
    assert set(rows[0]) == {"mu", "tau", "n", "active", "tail_miss"}
    for r in rows:
        assert r["tail_miss"] == float(tail_miss_probability(r["mu"], r["tau"], r["n"]))
        assert r["active"] == float(active_probability(r["mu"], r["n"]))
    assert [r["n"] for r in rows[:3]] == [2, 8, 131072]


def test_tail_miss_rho_and_table(capsys):
    assert main(["tail-miss", "--mu", "0.5", "--rho", "0.1", "--n", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["mu", "tau", "n", "active", "tail_miss"]
    assert out[1].split() == ["0.5", "0.05", "5", "0.9375", "0.7241"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--mu", "1.5", "--tau", "0.1", "--n", "2"], "--mu 1.5 is invalid"),
        (["--mu", "0.5", "--tau", "0.6", "--n", "2"], "--tau 0.6 is invalid for --mu 0.5"),
        (["--mu", "0.5", "--tau", "0.1", "--n", "0"], "--n 0.0 is invalid"),
        (["--mu", "0.5", "--tau", "0.1", "--n", "2.5"], "--n 2.5 is invalid"),
        (["--mu", "nan", "--tau", "0.1", "--n", "2"], "--mu nan is invalid"),
        (["--mu", "0.5", "--rho", "1.5", "--n", "2"], "--rho 1.5 is invalid"),
        (["--mu", "0.5", "--n", "2"], "give --mu, --tau (or --rho) and --n"),
    ],
)
def test_tail_miss_bad_args_exit_nonzero_with_message(argv, needle, capsys):
    assert main(["tail-miss", *argv]) == 2
    assert needle in capsys.readouterr().err


def test_console_exit_status():
    proc = subprocess.run(
        [sys.executable, "-m", "fgrpo_verl", "tail-miss", "--mu", "0.5", "--tau", "0.5", "--n", "4"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "--tau 0.5 is invalid for --mu 0.5" in proc.stderr


def test_tail_miss_plot(tmp_path):
    path = tmp_path / "fig3.png"
    assert main(["tail-miss", "--plot", str(path), "--rho", "0.05", "0.1", "--n-max", "128"]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_m_gamma_plot_draws_fig4_for_the_papers_gammas(tmp_path, capsys):
    path = tmp_path / "fig4.png"
    assert main(["m-gamma", "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr()
    assert [line.split()[0] for line in out.out.splitlines()[1:4]] == ["0", "0.5", "1"]  # Fig. 4's gammas
    assert str(path) in out.err


def test_simulate_writes_numbers_and_figures(tmp_path, capsys):
    out = tmp_path / "sim"
    argv = ["simulate", "--n", "2", "64", "4096", "--gamma", "0", "1", "--seeds", "2", "--steps", "30",
            "--actions", "400", "--correct", "40", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["group_sizes"] == [2, 64, 4096] and summary["config"]["seeds"] == 2
    assert len(summary["final"]) == 6
    lines = (out / "final.csv").read_text().splitlines()
    # the original columns keep their place and meaning; config and lr are appended
    assert lines[0] == "n,gamma,seed,q_pos,m_ret,anchor,entropy,config,lr" and len(lines) == 1 + 12
    assert lines[1].startswith("2,0,0,") and lines[1].endswith(",grpo,0.01")
    assert len((out / "curves.csv").read_text().splitlines()) == 1 + 31 * 6
    for name in summary["plots"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert "zone II" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--paper", "--n", "2"], "--paper fixes the grid; drop --n"),
        (["--n", "0"], "--n 0 is invalid: must be a whole number >= 1"),
        (["--gamma", "-1"], "--gamma -1.0 is invalid: must be in [0, inf)"),
        (["--actions", "10", "--correct", "10"], "--correct 10 is invalid for --actions 10"),
        (["--zone-threshold", "0"], "--zone-threshold 0.0 is invalid"),
        (["--gamma", "0", "--control"], "--control needs a gamma > 0 in --gamma"),
        (["--q-levels", "0.5", "1"], "--q-levels=1.0 is invalid: must be in (0, 1)"),
        (["--q-levels", "0.7", "0.7"], "--q-levels=[0.7, 0.7] repeats a level"),
    ],
)
def test_simulate_bad_args(argv, needle, capsys, tmp_path):
    assert main(["simulate", *argv, "--out", str(tmp_path)]) == 2
    assert needle in capsys.readouterr().err


def test_simulate_control_and_equal_q_readout_match_curves_csv(tmp_path, capsys):
    """--control adds GRPO at lr x m_gamma for each gamma > 0, labelled in both CSVs and summary.json; the
    equal-Q_pos readout equals a linear interpolation computed here from curves.csv."""
    import csv

    from fgrpo_verl.theory import mean_shrink

    out = tmp_path / "sim"
    argv = ["simulate", "--n", "4", "64", "--gamma", "0", "0.5", "1", "--seeds", "2", "--steps", "40", "--actions", "400",
            "--correct", "40", "--lr", "0.02", "--control", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    expected = {"grpo": (0.0, 0.02), "fgrpo_g0.5": (0.5, 0.02), "fgrpo_g1": (1.0, 0.02),
                "grpo_lr_x_m0.5": (0.0, 0.02 * mean_shrink(0.5)), "grpo_lr_x_m1": (0.0, 0.01)}
    assert {c["config"]: (c["gamma"], c["lr"]) for c in summary["config"]["configurations"]} == expected
    assert summary["config"]["controls"] == [0.5, 1.0]
    final = list(csv.DictReader((out / "final.csv").open()))
    assert len(final) == 2 * 5 * 2
    assert {(r["config"], r["gamma"], r["lr"]) for r in final} >= {("grpo_lr_x_m0.5", "0", f"{0.02 * mean_shrink(0.5):g}")}
    curves = list(csv.DictReader((out / "curves.csv").open()))
    assert len(curves) == 41 * 2 * 5

    blocks = summary["equal_q_pos"]
    assert [b["n"] for b in blocks] == [4, 64]
    for block in blocks:
        assert block["levels_source"] == "default" and len(block["rows"]) == 5 * len(block["levels"])
        for row in block["rows"]:
            pts = [(int(r["step"]), float(r["q_pos_mean"]), float(r["m_ret_mean"])) for r in curves
                   if int(r["n"]) == block["n"] and r["config"] == row["config"]]
            pts.sort()
            i = next(j for j, (_, q, _) in enumerate(pts) if q >= row["q_pos"])  # default levels: every one reaches
            if i == 0:
                step, m = pts[0][0], pts[0][2]
            else:
                (t0, q0, m0), (t1, q1, m1) = pts[i - 1], pts[i]
                w = (row["q_pos"] - q0) / (q1 - q0)
                step, m = t0 + w * (t1 - t0), m0 + w * (m1 - m0)
            assert row["step"] == pytest.approx(step, abs=0.02) and row["m_ret"] == pytest.approx(m, abs=1e-4)
            assert len(row["m_ret_per_seed"]) == len(row["step_per_seed"]) == 2
    printed = capsys.readouterr().out
    assert "at equal Q_pos" in printed and "grpo_lr_x_m0.5" in printed

    # a level nobody reaches is reported as such, not dropped
    assert main([*argv[:-3], "--q-levels", "0.999", "--out", str(tmp_path / "sim2"), "--no-progress"]) == 0
    rows = json.loads((tmp_path / "sim2" / "summary.json").read_text())["equal_q_pos"][0]["rows"]
    assert len(rows) == 5 and all(r["m_ret"] is None and r["step"] is None for r in rows)
    assert all(r["m_ret_per_seed"] == [None, None] for r in rows)
    assert "never reached" in capsys.readouterr().out


def test_simulate_equal_q_per_seed_readings_interpolate_each_seeds_curve():
    import numpy as np

    from fgrpo_verl.cli.simulate import equal_q_pos
    from fgrpo_verl.theory.categorical import CategoricalSetup, SimulationConfig, simulate

    result = simulate(SimulationConfig(group_sizes=(16,), gammas=(0.0,), seeds=3, steps=30, lr=0.02,
                                       setup=CategoricalSetup(400, 40), controls=()))
    level = float(np.round(result.q_pos[:, 0, 0, :].max(0).min() - 0.005, 4))  # below every seed's peak
    row = equal_q_pos(result, [level])[0]["rows"][0]
    for s in range(3):
        q, m = result.q_pos[:, 0, 0, s], result.m_ret[:, 0, 0, s]
        i = int(np.argmax(q >= level))
        assert i > 0  # a real crossing, not the start point
        w = (level - q[i - 1]) / (q[i] - q[i - 1])
        assert row["step_per_seed"][s] == pytest.approx(i - 1 + w)
        assert row["m_ret_per_seed"][s] == pytest.approx(m[i - 1] + w * (m[i] - m[i - 1]))


def test_simulate_names_levels_at_or_below_the_initial_q_pos_and_reads_only_the_others(tmp_path, capsys):
    out = tmp_path / "sim"
    argv = ["simulate", "--n", "4", "--gamma", "0", "1", "--seeds", "1", "--steps", "10", "--actions", "400",
            "--correct", "40", "--q-levels", "0.05", "0.99", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    (block,) = json.loads((out / "summary.json").read_text())["equal_q_pos"]
    assert block["start_q_pos"] > 0.05 and block["levels_at_or_below_start"] == [0.05] and block["levels"] == [0.99]
    assert {r["q_pos"] for r in block["rows"]} == {0.99}
    assert "0.050 at or below the initial Q_pos" in capsys.readouterr().out


# Both commands raise and leave the line and the exit status to fgrpo_verl/cli/errors.py: the message names the flags
# (the theory modules name their arguments), is one line, and --debug shows the traceback instead.
@pytest.mark.parametrize("argv, line", [
    (["tail-miss", "--mu", "0.5", "--tau", "0.6", "--n", "2"],
     "--tau 0.6 is invalid for --mu 0.5: the rare subset's mass must satisfy 0 < --tau < --mu"),
    (["tail-miss", "--mu", "0.5", "--n", "2"], "give --mu, --tau (or --rho) and --n; or --plot PATH for the figure"),
    (["simulate", "--correct", "20000"],
     "--correct 20000 is invalid for --actions 12800: need 1 <= --correct < --actions"),
    (["simulate", "--zone-threshold", "2"], "--zone-threshold 2.0 is invalid: must be in (0, 1]"),
])
def test_bad_input_is_one_line_with_the_flags_named_and_exit_2(argv, line, tmp_path, capsys):
    out = ["--out", str(tmp_path)] if argv[0] == "simulate" else []
    assert main([*argv, *out]) == 2
    assert capsys.readouterr().err == f"fgrpo-verl {argv[0]}: error: {line}\n"
    with pytest.raises(ValueError, match="is invalid|give --mu") as raised:
        main(["--debug", *argv, *out])
    assert str(raised.value) == line
