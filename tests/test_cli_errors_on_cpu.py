"""How commands turn what they raise into lines and exit statuses (fgrpo_verl/cli/errors.py), and which errors of
``launch``'s planning count as the user's config (exit 2) rather than a bug (exit 1, traceback with --debug)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fgrpo_verl.cli import main
from fgrpo_verl.cli.errors import report_errors


def _recipe(tmp_path: Path, *extra: str) -> Path:
    data = {
        "name": "tiny", "project": "tiny", "reproduces": "a constructed test",
        "common": ["backend=cpu", "algo=grpo", f"actor_rollout_ref.model.path={tmp_path / 'model'}",
                   "data.train_files=x.parquet", "data.val_files=x.parquet", "data.train_batch_size=4",
                   "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                   "data.max_response_length=16", "trainer.total_epochs=2", *extra],
        "runs": [{"name": "g0", "group": "g", "overrides": ["algorithm.fgrpo.gamma=0.0"]}],
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_bug_while_planning_is_not_reported_as_an_invalid_config(tmp_path, monkeypatch):
    import fgrpo_verl.data.records as records
    from fgrpo_verl.launch import plan_jobs

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")

    monkeypatch.setattr(records, "parquet_rows", broken)
    with pytest.raises(TypeError, match="unsupported operand"):
        plan_jobs(str(_recipe(tmp_path)), None, [], tmp_path / "logs", tmp_path, check=False)


def test_a_config_that_cannot_be_resolved_names_the_run(tmp_path):
    from fgrpo_verl.launch import plan_jobs

    path = _recipe(tmp_path, "+trainer.note=${no.such.key}")
    with pytest.raises(ValueError, match=r"recipe tiny, run g0: invalid config: .*no\.such\.key"):
        plan_jobs(str(path), None, [], tmp_path / "logs", tmp_path, check=False)


def test_a_bug_exits_1_with_an_internal_error_line_and_a_bad_config_exits_2(tmp_path, monkeypatch, capsys):
    import fgrpo_verl.data.records as records

    monkeypatch.chdir(tmp_path)
    path = _recipe(tmp_path)
    assert main(["launch", str(path), "--dry-run", "--no-eval", "algo=grpoo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid config" in err[0] and "grpoo" in err[0], err

    monkeypatch.setattr(records, "parquet_rows", lambda *a, **k: None.missing)
    assert main(["launch", str(path), "--dry-run", "--no-eval"]) == 1
    err = capsys.readouterr().err
    assert "internal error: AttributeError" in err and "invalid config" not in err, err


def test_a_multi_line_user_error_is_printed_whole_without_a_traceback(capsys):
    refusal = "\n".join(f"recipe r, run n{i}-g0p0: trainer.nnodes=2 needs 2 nodes, the cluster group has 1"
                        for i in range(3))
    def refuse():
        raise ValueError(refusal)

    assert report_errors("launch", False, refuse) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "more lines" not in err
    assert err.strip().splitlines() == [f"fgrpo-verl launch: error: {line}" for line in refusal.splitlines()]


def test_a_one_line_user_error_stays_one_line(capsys):
    def refuse():
        raise ValueError("--significance-iterations must be >= 1, got 0")

    assert report_errors("report", False, refuse) == 2
    assert capsys.readouterr().err == "fgrpo-verl report: error: --significance-iterations must be >= 1, got 0\n"


def test_report_relies_on_the_common_mapping(tmp_path, monkeypatch, capsys):
    """``report`` leaves its errors to report_errors: a multi-line refusal reaches the terminal whole, exit 2."""
    import fgrpo_verl.report.build as report_build

    def refuse(*args, **kwargs):
        raise ValueError("recipe x, run a: first refusal\nrecipe x, run b: second refusal")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(report_build, "build_report", refuse)
    assert main(["report", "maze", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "fgrpo-verl report: error: recipe x, run a: first refusal",
        "fgrpo-verl report: error: recipe x, run b: second refusal"]
