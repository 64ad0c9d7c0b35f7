"""The plan an evaluation job carries (fgrpo_verl/evaluation/plan.py): JSON that reads back to the same plan, and a
plan of another shape (a job script from another version) refused in one line naming the key."""

import copy
import json
import subprocess

import pytest

from fgrpo_verl.evaluation.plan import Pass, Plan


def plan_dict() -> dict:
    steps = {"save_freq": 2, "total": 4, "train_batch_size": 4, "group_size": 4, "epochs_only": None}
    return {"recipe": "t", "run": "r", "experiment": "exp", "project": "p", "run_dir": "/runs/r", "gamma": 0.5,
            "wandb": {"run_id": "id1", "log": True}, "steps": steps,
            "benchmarks": {"A": {"file": "/b/it's $(x) \"q\".jsonl", "scorer": "math", "group": "math"}},
            "averages": {"Avg": ["A"]}, "select_by": "Avg",
            "passes": {"selection": {"n": 4, "benchmarks": ["A"]}, "final": {"n": 8, "benchmarks": ["A"]}},
            "protocol": "select",
            "sampling": {"backend": "vllm", "temperature": 1.0, "top_p": 1.0, "seed": 0, "threshold": 1.0,
                         "prompt_preset": "none", "max_new_tokens": 6},
            "setting_source": "recipe", "engine": {"tensor_parallel_size": 2, "vllm_engine_args": {"a": [1]}},
            "gpus": 8, "workers": 1,
            "baseline": {"run": "b", "experiment": "exp-b", "run_dir": "/runs/b", "steps": dict(steps)}}


def test_a_plan_reads_back_from_its_json_as_the_same_plan():
    plan = Plan.from_dict(plan_dict())
    assert plan.passes["final"] == Pass(8, ("A",)) and plan.baseline.steps.total == 4
    text = plan.to_json()
    assert Plan.from_json(text) == plan and json.loads(text) == plan_dict() == plan.to_dict()
    assert text.isascii() and len(text.splitlines()) == len(plan_dict()) + 2  # one top-level key per line
    without = Plan.from_dict({**plan_dict(), "baseline": None})
    assert Plan.from_json(without.to_json()) == without


def test_a_plan_with_quotes_dollars_and_backticks_stays_data_in_the_job_scripts_here_document(tmp_path):
    plan = Plan.from_dict({**plan_dict(), "setting_source": "\u2028line", "run_dir": "/r/it's $(touch x) `id` \\"})
    script = tmp_path / "s.sh"
    script.write_text(f"cat <<'FGRPO_EVAL_PLAN' > {tmp_path}/out.json\n{plan.to_json()}\nFGRPO_EVAL_PLAN\n")
    assert subprocess.run(["bash", str(script)], cwd=tmp_path).returncode == 0
    assert Plan.from_json((tmp_path / "out.json").read_text()) == plan and not (tmp_path / "x").exists()


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(extra=1), r"^plan: unknown key\(s\) \['extra'\]; this version's keys: \["),
    (lambda d: d["sampling"].pop("seed"), r"^plan\.sampling: missing key\(s\) \['seed'\]; .*launch the recipe again"),
    (lambda d: d["baseline"]["steps"].update(every=2), r"^plan\.baseline\.steps: unknown key\(s\) \['every'\]"),
    (lambda d: d["passes"].pop("final"), r"^plan\.passes: missing key\(s\) \['final'\]"),
    (lambda d: d["passes"]["final"].update(n="8"), r"^plan\.passes\.final\.n: expected int, got '8'$"),
    (lambda d: d["averages"].update(Avg="A"), r"^plan\.averages\.Avg: expected a list, got 'A'$"),
])
def test_a_plan_of_another_shape_is_refused_in_one_line_naming_the_key(edit, match):
    data = copy.deepcopy(plan_dict())
    edit(data)
    with pytest.raises(ValueError, match=match) as err:
        Plan.from_json(json.dumps(data))
    assert "\n" not in str(err.value)
