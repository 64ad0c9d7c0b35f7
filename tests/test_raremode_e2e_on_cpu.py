"""The rare-mode demo end to end at toy scale: build, SFT, one GRPO run through verl on the CPU backend, exact
per-step metrics from the checkpoints verl saved, sampled pass@k, table, plot and results file."""

from __future__ import annotations

import json

import pytest


@pytest.mark.e2e
@pytest.mark.ray
def test_raremode_demo_end_to_end_tiny(tmp_path, capsys):
    from fgrpo_verl.cli import main

    rc = main([
        "demo", "--out-dir", str(tmp_path), "--n-train", "64", "--n-val", "8", "--sft-steps", "20",
        "--rl-steps", "2", "--batch-size", "4", "--n", "2", "--seeds", "1", "--gammas", "0", "--pass-n", "4",
    ])
    captured = capsys.readouterr()
    out = captured.out
    assert rc == 0, out[-4000:]
    # no progress bar per model load or save (the per-step scoring loads every checkpoint)
    assert "Loading weights" not in captured.err + out and "Writing model shards" not in captured.err + out
    results = json.loads((tmp_path / "raremode_results.json").read_text())
    curve = results["runs"]["grpo"]["0"]["curve"]
    assert sorted(int(t) for t in curve) == [0, 1, 2]  # the warm start and both saved steps
    assert curve["0"]["m_ret"] == 1.0 and curve["0"]["delta_nll_rare"] == 0.0
    assert curve["2"] != curve["0"], "verl's updates left the exact metrics unchanged"
    final = results["runs"]["grpo"]["0"]["final"]
    assert 0.0 <= final["q_pos"] <= 1.0 and 0.0 <= final["pass@1"] <= final["pass@4"] <= 1.0
    assert set(results["runs"]["grpo"]["0"]["train_reward"]) == {"1", "2"}
    assert any(line.startswith("grpo ") for line in out.splitlines()), out[-2000:]
    assert (tmp_path / "raremode_curves.png").stat().st_size > 0
    # the equal-Q_pos table: by default every completed run reaches every level, so the one run has a reading;
    # two tiny steps may leave Q_pos at or below the SFT start, and then no level compares anything
    equal_q = results["equal_q_pos"]
    from fgrpo_verl.evaluation.frontier import floor3

    rose = floor3(max(m["q_pos"] for m in curve.values())) > results["sft_start"]["q_pos"]  # a level above the start
    assert equal_q["levels_source"] == "default" and bool(equal_q["levels"]) == rose, (equal_q, curve)
    if not rose:
        assert "nothing to compare" in out
    for block in equal_q["by_level"]:
        assert block["configs"]["grpo"]["reached"] == 1 and block["configs"]["grpo"]["per_seed"]["0"] is not None
    assert "at equal Q_pos" in out
