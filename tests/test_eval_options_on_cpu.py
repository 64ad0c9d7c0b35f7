"""An evaluation's options (fgrpo_verl/evaluation/options.py): declared once for the command line and for the
evaluation jobs, which build them from their plan without an argv (fgrpo_verl/evaluation/checkpoint_eval.py)."""

import argparse

import pytest

from fgrpo_verl.evaluation.checkpoint_eval import pass_options
from fgrpo_verl.evaluation.options import add_arguments, eval_options, from_text
from fgrpo_verl.evaluation.plan import Plan


def _parsed(argv):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_options_take_the_command_lines_defaults_and_checks(tmp_path):
    built = eval_options(out=str(tmp_path))
    parsed = _parsed(["--out", str(tmp_path)])
    parsed.samples_per_request = parsed.n  # what validation fills in
    assert vars(built) == vars(parsed)
    with pytest.raises(ValueError, match=r"unknown evaluation option\(s\) \['nn'\]"):
        eval_options(out=str(tmp_path), nn=3)
    with pytest.raises(ValueError, match=r"\['out'\] are required"):
        eval_options(n=3)
    with pytest.raises(ValueError, match="--top-p must be in"):
        eval_options(out=str(tmp_path), top_p=1.5)
    with pytest.raises(ValueError, match="--backend must be one of vllm, transformers, got 'vlm'"):
        eval_options(out=str(tmp_path), backend="vlm")
    with pytest.raises(ValueError, match="unknown evaluation option 'gpus'"):
        from_text("gpus", "2")
    with pytest.raises(ValueError, match="--bench AIME24=.*: no such file"):
        eval_options(out=str(tmp_path), bench=[f"AIME24={tmp_path / 'absent.jsonl'}"])


def test_a_checkpoints_pass_has_the_options_its_command_line_would_have(tmp_path):
    bench = tmp_path / "AIME24.jsonl"
    bench.write_text('{"id": "1", "problem": "p", "answer": "1"}\n')
    from test_eval_plan_on_cpu import plan_dict

    plan = Plan.from_dict({
        **plan_dict(),
        "sampling": {"backend": "vllm", "temperature": 1.0, "top_p": 0.95, "seed": 7, "prompt_preset": "none",
                     "max_new_tokens": 64, "threshold": 1.0},
        "engine": {"tensor_parallel_size": "2", "vllm_engine_args": {"enforce_eager": True}, "max_model_len": None},
        "passes": {"selection": {"n": 32, "benchmarks": ["AIME24"]}, "final": {"n": 32, "benchmarks": ["AIME24"]}},
        "benchmarks": {"AIME24": {"file": str(bench), "scorer": "math", "group": "math"}},
        "averages": {"Math Avg": ["AIME24"]},
    })
    out = tmp_path / "out"
    built = pass_options(plan, "selection", "step4", tmp_path / "model", out, resume=True)
    parsed = _parsed([
        "--model", f"step4={tmp_path / 'model'}", "--out", str(out), "--no-plots", "--n", "32", "--backend", "vllm",
        "--temperature", "1.0", "--top-p", "0.95", "--seed", "7", "--prompt-preset", "none", "--max-new-tokens",
        "64", "--threshold", "1.0", "--bench", f"AIME24={bench}", "--bench-scorer", "AIME24=math",
        "--bench-group", "AIME24=math", "--average", "Math Avg=AIME24", "--tensor-parallel-size", "2",
        "--vllm-engine-args", '{"enforce_eager": true}', "--resume",
    ])
    parsed.samples_per_request = parsed.n
    assert vars(built) == vars(parsed)
    assert built.tensor_parallel_size == 2 and built.vllm_engine_args == '{"enforce_eager": true}'
