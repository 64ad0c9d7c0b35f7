"""An evaluation's options (fgrpo_verl/evaluation/options.py): declared once for the command line and for the
evaluation jobs, which build them from their plan without an argv (fgrpo_verl/evaluation/checkpoint_eval.py)."""

import argparse

import pytest

from fgrpo_verl.evaluation.checkpoint_eval import pass_options
from fgrpo_verl.evaluation.options import add_arguments, eval_options
from fgrpo_verl.evaluation.plan import Plan


def _parsed(argv):
    """The options ``fgrpo-verl eval ARGV`` runs with."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return eval_options(**vars(parser.parse_args(argv)))


def test_options_take_the_command_lines_defaults_and_checks(tmp_path):
    built = eval_options(out=str(tmp_path))
    assert built == _parsed(["--out", str(tmp_path)])
    assert (built.n, built.samples_per_request, built.backend, built.save_completions) == (1024, 1024, "vllm", True)
    assert not _parsed(["--out", str(tmp_path), "--no-save-completions"]).save_completions
    with pytest.raises(ValueError, match=r"^--nn: unknown key; valid keys: \['tensor_parallel_size', "):
        eval_options(out=str(tmp_path), nn=3)
    with pytest.raises(ValueError, match=r"^--out is required: a string$"):
        eval_options(n=3)
    with pytest.raises(ValueError, match=r"^--top-p must be <= 1\.0, got 1\.5$"):
        eval_options(out=str(tmp_path), top_p=1.5)
    with pytest.raises(ValueError, match=r"^--backend: expected one of \['vllm', 'transformers'\] \(vllm \(GPU"):
        eval_options(out=str(tmp_path), backend="vlm")
    with pytest.raises(ValueError, match=r"^--n: expected an integer, got '32'$"):  # a plan's values are not text
        eval_options(out=str(tmp_path), n="32")
    with pytest.raises(ValueError, match=r"^--tensor-parallel-size must be >= 1, got 0$"):
        eval_options(out=str(tmp_path), tensor_parallel_size=0)
    with pytest.raises(ValueError, match="--bench AIME24=.*: no such file"):
        eval_options(out=str(tmp_path), bench=[f"AIME24={tmp_path / 'absent.jsonl'}"])


def test_a_checkpoints_pass_has_the_options_its_command_line_would_have(tmp_path):
    bench = tmp_path / "AIME24.jsonl"
    bench.write_text('{"id": "1", "problem": "p", "answer": "1"}\n')
    from test_eval_plan_on_cpu import plan_dict

    plan = Plan.read({
        **plan_dict(),
        "sampling": {"backend": "vllm", "temperature": 1.0, "top_p": 0.95, "seed": 7, "prompt_preset": "none",
                     "max_new_tokens": 64, "threshold": 1.0},
        "engine": {"tensor_parallel_size": 2, "vllm_engine_args": {"enforce_eager": True}, "max_model_len": None},
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
    assert built == parsed
    assert built.tensor_parallel_size == 2 and built.vllm_engine_args == '{"enforce_eager": true}'
