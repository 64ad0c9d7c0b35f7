"""fgrpo_verl.evaluation.frontier: a metric read where another first reaches a level (linear interpolation)."""

from __future__ import annotations

import math

import pytest

from fgrpo_verl.evaluation.frontier import at_level, check_levels, default_levels, floor3


def test_interpolates_between_the_two_steps_around_the_crossing():
    # q crosses 0.5 between step 2 (0.4) and step 4 (0.6): w = 0.5 -> step 3, m = (0.8 + 0.6) / 2
    c = at_level([0, 2, 4, 6], [0.2, 0.4, 0.6, 0.7], {"m": [1.0, 0.8, 0.6, 0.5], "d": [0, 0.1, 0.3, 0.4]}, 0.5)
    assert c.level == 0.5 and c.step == pytest.approx(3.0)
    assert c.values["m"] == pytest.approx(0.7) and c.values["d"] == pytest.approx(0.2)
    # an uneven weight: 0.45 is a quarter of the way from 0.4 to 0.6
    c = at_level([0, 2, 4, 6], [0.2, 0.4, 0.6, 0.7], {"m": [1.0, 0.8, 0.6, 0.5]}, 0.45)
    assert c.step == pytest.approx(2.5) and c.values["m"] == pytest.approx(0.75)


def test_exact_touch_first_crossing_start_and_never():
    q, m = [0.2, 0.5, 0.4, 0.9], [1.0, 0.7, 0.8, 0.1]
    # touching the level exactly reads that step (w = 1)
    assert at_level([1, 2, 3, 4], q, {"m": m}, 0.5).step == pytest.approx(2.0)
    # the first crossing counts, not the later one after the dip
    c = at_level([1, 2, 3, 4], q, {"m": m}, 0.45)
    assert c.step == pytest.approx(1 + 0.25 / 0.3) and c.values["m"] == pytest.approx(1.0 - 0.3 * 0.25 / 0.3)
    # a curve that starts at or above the level is read at its first point
    c = at_level([5, 6], [0.7, 0.8], {"m": [0.9, 0.1]}, 0.6)
    assert (c.step, c.values["m"]) == (5.0, 0.9)
    # never reached
    assert at_level([1, 2, 3, 4], q, {"m": m}, 0.95) is None
    # NaN in a value curve is carried, not dropped
    assert math.isnan(at_level([0, 1], [0.1, 0.9], {"m": [float("nan"), 0.5]}, 0.5).values["m"])


def test_a_diverged_reach_curve_has_no_crossing():
    with pytest.raises(ValueError, match="reach holds a non-finite value at step 1"):
        at_level([0, 1, 2], [0.1, float("nan"), 0.3], {}, 0.2)


def test_default_levels_are_reached_by_every_curve():
    assert floor3(0.6849) == 0.684 and floor3(0.684) == 0.684 and floor3(0.5) == 0.5
    assert default_levels(0.411, [0.6849, 0.75, 0.9]) == [0.547, 0.684]
    # a curve that never rises above the start: no level compares anything
    assert default_levels(0.5, [0.45, 0.7]) == [] and default_levels(0.5, [0.5004, 0.7]) == []
    with pytest.raises(ValueError, match="peaks is empty"):
        default_levels(0.5, [])


def test_check_levels_sorts_and_rejects():
    assert check_levels("--q-levels", [0.9, 0.6]) == [0.6, 0.9]
    for bad, match in (([0.5, 1.0], r"=1\.0 is invalid: must be in \(0, 1\)"), ([0.0], "=0.0 is invalid"),
                       ([float("nan")], "=nan is invalid"), ([0.5, 0.5], "repeats a level"), ([], "is empty"),
                       ([True], "=True is invalid")):
        with pytest.raises(ValueError, match=match):
            check_levels("--q-levels", bad)


# ---------------------------------------------------------------- the rare-mode demo's equal-Q_pos table
def _run(q, m, d=None):
    d = d if d is not None else [1 - x for x in m]
    # JSON-shaped: seed and step keys are strings, as in a loaded raremode_results.json
    return {"curve": {str(t): {"q_pos": q[t], "m_ret": m[t], "delta_nll_rare": d[t]} for t in range(len(q))}}


def _results():
    return {
        "sft_start": {"q_pos": 0.4},
        "runs": {
            "grpo": {"0": _run([0.4, 0.5, 0.6, 0.7, 0.8], [1, 0.9, 0.8, 0.7, 0.6]),
                     "1": _run([0.4, 0.45, 0.5, 0.55, 0.6], [1, 0.96, 0.92, 0.88, 0.84])},
            "fgrpo_g1": {"0": _run([0.4, 0.5, 0.6, 0.7, 0.75], [1, 0.95, 0.9, 0.85, 0.8]),
                         "1": _run([0.4, 0.42, 0.44, 0.46, 0.48], [1, 0.99, 0.98, 0.97, 0.96])},
            "empty": {},  # a configuration whose every run failed: not a row
        },
    }


def test_equal_q_table_matches_hand_interpolation():
    from fgrpo_verl.tasks.raremode.report import report_from_results

    lines, block = report_from_results(_results(), [0.55])
    text = "\n".join(lines)
    grpo = block["by_level"][0]["configs"]["grpo"]
    # seed 0 crosses 0.55 halfway between steps 1 and 2 (M_ret 0.85), seed 1 touches it at step 3 (M_ret 0.88)
    assert grpo["per_seed"]["0"]["step"] == pytest.approx(1.5) and grpo["per_seed"]["0"]["m_ret"] == pytest.approx(0.85)
    assert grpo["per_seed"]["1"]["step"] == pytest.approx(3.0) and grpo["per_seed"]["1"]["m_ret"] == pytest.approx(0.88)
    # mean 0.865; 95% half-width with 2 seeds = t_{0.975,1} * |0.85 - 0.88| / 2 = 12.706 * 0.015
    assert grpo["m_ret"]["mean"] == pytest.approx(0.865) and grpo["m_ret"]["half_width"] == pytest.approx(12.7062 * 0.015, rel=1e-4)
    assert grpo["step"]["mean"] == pytest.approx(2.25)
    assert "0.865 ± 0.191" in text and "2.250 ± " in text
    # F-GRPO seed 1 peaks at 0.48: counted and named, not dropped; the paired difference uses seed 0 alone
    f = block["by_level"][0]["configs"]["fgrpo_g1"]
    assert (f["reached"], f["seeds"], f["not_reached_seeds"], f["per_seed"]["1"]) == (1, 2, [1], None)
    assert f["m_ret"]["mean"] == pytest.approx(0.925)
    assert f["diff_vs_grpo_m_ret"]["mean"] == pytest.approx(0.075) and f["diff_vs_grpo_m_ret"]["seeds"] == [0]
    row = next(line for line in lines if line.startswith("fgrpo_g1"))
    assert "1/2" in row and "0.925" in row and "0.075" in row
    assert "empty" not in block["by_level"][0]["configs"] and "empty" not in text


def test_equal_q_default_levels_every_run_reaches_and_never_reached_rows():
    from fgrpo_verl.tasks.raremode.report import report_from_results

    _, block = report_from_results(_results())
    # the lowest peak is 0.48 (F-GRPO seed 1); the midpoint from the SFT start 0.4 is 0.44
    assert block["levels"] == [0.44, 0.48] and block["levels_source"] == "default"
    assert all(c["reached"] == c["seeds"] for b in block["by_level"] for c in b["configs"].values())
    # F-GRPO seed 1 touches 0.44 at step 2 exactly
    assert block["by_level"][0]["configs"]["fgrpo_g1"]["per_seed"]["1"] == {"step": 2.0, "m_ret": 0.98,
                                                                              "delta_nll_rare": pytest.approx(0.02)}
    lines, block = report_from_results(_results(), [0.9])
    assert sum("never reaches Q_pos 0.900" in line for line in lines) == 2
    assert block["by_level"][0]["configs"]["grpo"]["not_reached_seeds"] == [0, 1]


def test_demo_reports_equal_q_from_a_results_file(tmp_path, capsys):
    import json

    from fgrpo_verl.cli import build_parser

    path = tmp_path / "raremode_results.json"
    path.write_text(json.dumps(_results()))
    args = build_parser().parse_args(["demo", "--out-dir", str(tmp_path / "out"), "--report-equal-q", str(path),
                                      "--q-levels", "0.55,0.5"])
    assert args._run(args) == 0
    out = capsys.readouterr().out
    assert "levels 0.500, 0.550, given" in out and "0.865 ± 0.191" in out
    assert not (tmp_path / "out").exists()  # nothing trained or built
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable raremode_results.json"):
        args._run(args)


def test_equal_q_table_survives_a_run_with_a_non_finite_q_pos():
    """A run whose Q_pos curve holds NaN (a diverged policy) is named and counted as not read, not a crash: the demo
    computes this table before it writes raremode_results.json, so a crash there loses every run's numbers."""
    from fgrpo_verl.tasks.raremode.report import report_from_results

    results = _results()
    results["runs"]["grpo"]["2"] = _run([0.4, 0.6, float("nan"), float("nan"), float("nan")], [1, 0.9, 0.8, 0.7, 0.6])
    for levels in (None, [0.55]):
        lines, block = report_from_results(results, levels)
        grpo = block["by_level"][-1]["configs"]["grpo"]
        assert grpo["invalid_seeds"] == [2] and 2 in grpo["not_reached_seeds"] and grpo["per_seed"]["2"] is None
        assert (grpo["reached"], grpo["seeds"]) == (2, 3)
        assert any("non-finite Q_pos" in line and "grpo" in line for line in lines), lines
    # the default levels come from the runs that can be read: the same as without the broken run
    assert report_from_results(results)[1]["levels"] == [0.44, 0.48]


def test_maze_demo_rejects_the_raremode_only_equal_q_flags(tmp_path, monkeypatch):
    """--report-equal-q / --q-levels belong to the rare-mode demo; with --task maze they must not be ignored while
    a maze training run starts instead of the promised no-training report."""
    import fgrpo_verl.cli.demo as demo_cli
    from fgrpo_verl.cli import build_parser

    def no_training(args):
        raise AssertionError("the maze demo started training")

    monkeypatch.setattr(demo_cli, "_run_maze", no_training)
    for extra, needle in ((["--report-equal-q", str(tmp_path / "r.json")], "--report-equal-q"),
                          (["--q-levels", "0.5"], "--q-levels")):
        args = build_parser().parse_args(["demo", "--task", "maze", "--out-dir", str(tmp_path / "out"), *extra])
        with pytest.raises(ValueError, match=needle):
            args._run(args)


def test_levels_at_or_below_the_start_are_named_and_not_read():
    """Every run is at a level <= its start from step 0 (read as '1.000 @ 0.0' for everyone before): the reports
    name such levels and read only the others."""
    from fgrpo_verl.evaluation.frontier import above_start
    from fgrpo_verl.tasks.raremode.report import report_from_results

    assert above_start([0.3, 0.4, 0.45, 0.5], 0.4) == ([0.45, 0.5], [0.3, 0.4])
    lines, block = report_from_results(_results(), [0.3, 0.44])
    assert block["levels"] == [0.44] and block["levels_at_or_below_start"] == [0.3]
    assert [b["q_pos"] for b in block["by_level"]] == [0.44]
    assert any("0.300 at or below the SFT start" in line for line in lines)
    lines, block = report_from_results(_results(), [0.3])
    assert block["by_level"] == [] and "nothing to compare" in lines[0]
