"""The plan an evaluation job carries (fgrpo_verl/evaluation/plan.py): JSON that reads back to the same plan, and a
plan of another shape (a job script from another version) refused in one line naming the key."""

import copy
import json
import subprocess

import pytest

from fgrpo_verl.evaluation.plan import Pass, Plan


def plan_dict() -> dict:
    steps = {"save_freq": 2, "total": 4, "train_batch_size": 4, "group_size": 4, "epochs_only": None}
    engine = {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9, "max_model_len": None,
              "vllm_engine_args": '{"a": [1]}', "device": "cpu", "dtype": "float32", "batch_size": 64,
              "problems_per_call": 32, "samples_per_request": None, "score_workers": 1}
    return {"recipe": "t", "run": "r", "experiment": "exp", "project": "p", "run_dir": "/runs/r", "gamma": 0.5,
            "wandb": {"run_id": "id1", "log": True}, "steps": steps,
            "benchmarks": {"A": {"file": "/b/it's $(x) \"q\".jsonl", "scorer": "math", "group": "math"}},
            "averages": {"Avg": ["A"]}, "select_by": "Avg",
            "passes": {"selection": {"n": 4, "benchmarks": ["A"]}, "final": {"n": 8, "benchmarks": ["A"]}},
            "protocol": "select",
            "sampling": {"backend": "vllm", "temperature": 1.0, "top_p": 1.0, "seed": 0, "threshold": 1.0,
                         "prompt_preset": "none", "max_new_tokens": 6},
            "setting_source": "recipe", "engine": engine, "gpus": 8, "workers": 1,
            "baseline": {"run": "b", "experiment": "exp-b", "run_dir": "/runs/b", "steps": dict(steps)}}


def test_a_plan_reads_back_from_its_json_as_the_same_plan():
    plan = Plan.read(plan_dict())
    assert plan.passes["final"] == Pass(n=8, benchmarks=["A"]) and plan.baseline.steps.total == 4
    text = plan.to_json()
    assert Plan.read(text) == plan and json.loads(text) == plan_dict() == plan.model_dump()
    assert "\n" not in text  # one line in the job script's here-document
    without = Plan.read({**plan_dict(), "baseline": None})
    assert Plan.read(without.to_json()) == without
    # a recipe writes the engine's arguments as a mapping: the plan carries them as the command line's JSON
    mapped = Plan.read({**plan_dict(), "engine": {"vllm_engine_args": {"a": [1]}, "tensor_parallel_size": 2}})
    assert mapped == plan


def test_a_plan_with_quotes_dollars_and_backticks_stays_data_in_the_job_scripts_here_document(tmp_path):
    plan = Plan.read({**plan_dict(), "setting_source": "\u2028line\nFGRPO_EVAL_PLAN\n",
                      "run_dir": "/r/it's $(touch x) `id` \\"})
    script = tmp_path / "s.sh"
    script.write_text(f"cat <<'FGRPO_EVAL_PLAN' > {tmp_path}/out.json\n{plan.to_json()}\nFGRPO_EVAL_PLAN\n")
    assert subprocess.run(["bash", str(script)], cwd=tmp_path).returncode == 0
    assert Plan.read((tmp_path / "out.json").read_text()) == plan and not (tmp_path / "x").exists()


AGAIN = r"; a job planned by another version of fgrpo-verl\? launch the recipe again to plan it$"


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(extra=1), r"^plan\.extra: unknown key; valid keys: \['recipe', 'run', "),
    (lambda d: d["sampling"].pop("seed"), r"^plan\.sampling\.seed is required: an integer" + AGAIN),
    (lambda d: d["baseline"]["steps"].update(every=2), r"^plan\.baseline\.steps\.every: unknown key"),
    (lambda d: d["passes"].pop("final"), r"^plan\.passes\.final is required: a mapping with keys \['n', "),
    (lambda d: d["passes"]["final"].update(n="8"), r"^plan\.passes\.final\.n: expected an integer, got '8'" + AGAIN),
    (lambda d: d["averages"].update(Avg="A"), r"^plan\.averages\.Avg: expected a list, each a string, got 'A'"),
    (lambda d: d["engine"].update(tensor_parallel_size=True), r"^plan\.engine\.tensor_parallel_size: expected an "
                                                              r"integer, got True"),
    (lambda d: d["wandb"].update(log="yes"), r"^plan\.wandb\.log: expected true or false, got 'yes'"),
])
def test_a_plan_of_another_shape_is_refused_in_one_line_naming_the_key(edit, match):
    data = copy.deepcopy(plan_dict())
    edit(data)
    with pytest.raises(ValueError, match=match) as err:
        Plan.read(json.dumps(data))
    assert "\n" not in str(err.value) and str(err.value).endswith("launch the recipe again to plan it")
    with pytest.raises(ValueError, match=match):  # the launch's record holds it parsed
        Plan.read(data)
