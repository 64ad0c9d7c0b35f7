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
        (["--mu", "1.5", "--tau", "0.1", "--n", "2"], "mu=1.5 is invalid"),
        (["--mu", "0.5", "--tau", "0.6", "--n", "2"], "tau=0.6 is invalid for mu=0.5"),
        (["--mu", "0.5", "--tau", "0.1", "--n", "0"], "n=0.0 is invalid"),
        (["--mu", "0.5", "--tau", "0.1", "--n", "2.5"], "n=2.5 is invalid"),
        (["--mu", "nan", "--tau", "0.1", "--n", "2"], "mu=nan is invalid"),
        (["--mu", "0.5", "--rho", "1.5", "--n", "2"], "rho=1.5 is invalid"),
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
    assert "tau=0.5 is invalid for mu=0.5" in proc.stderr


def test_tail_miss_plot(tmp_path):
    path = tmp_path / "fig3.png"
    assert main(["tail-miss", "--plot", str(path), "--rho", "0.05", "0.1", "--n-max", "128"]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_writes_numbers_and_figures(tmp_path, capsys):
    out = tmp_path / "sim"
    argv = ["simulate", "--n", "2", "64", "4096", "--gamma", "0", "1", "--seeds", "2", "--steps", "30",
            "--actions", "400", "--correct", "40", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["group_sizes"] == [2, 64, 4096] and summary["config"]["seeds"] == 2
    assert len(summary["final"]) == 6
    lines = (out / "final.csv").read_text().splitlines()
    assert lines[0] == "n,gamma,seed,q_pos,m_ret,anchor,entropy" and len(lines) == 1 + 12
    assert len((out / "curves.csv").read_text().splitlines()) == 1 + 31 * 6
    for name in summary["plots"]:
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert "zone II" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--paper", "--n", "2"], "--paper fixes the grid; drop --n"),
        (["--n", "0"], "group_sizes holds 0"),
        (["--gamma", "-1"], "gammas holds -1.0"),
        (["--actions", "10", "--correct", "10"], "num_correct=10 is invalid for num_actions=10"),
        (["--zone-threshold", "0"], "zone_threshold=0.0 is invalid"),
    ],
)
def test_simulate_bad_args(argv, needle, capsys, tmp_path):
    assert main(["simulate", *argv, "--out", str(tmp_path)]) == 2
    assert needle in capsys.readouterr().err
