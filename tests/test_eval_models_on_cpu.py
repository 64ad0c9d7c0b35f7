"""Model-backed evaluation on tiny random-weight Qwen2 models built locally: ΔNLL_rare (App. M.2), `eval --model`."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from transformers import AutoTokenizer

from evaluation_tiny_lm import build_tiny_lm, fake_vllm_imported
from fgrpo_verl.cli import main
from fgrpo_verl.evaluation.formats import read_generations
from fgrpo_verl.evaluation.generate import Request, TransformersSampler, load_model
from fgrpo_verl.evaluation.prompts import encode_prompt, prompt_setting
from fgrpo_verl.evaluation.generate import request_seed
from fgrpo_verl.evaluation.rare_nll import length_normalised_nll, select_rare, tokenize_pairs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return build_tiny_lm(root / "base", seed=0), build_tiny_lm(root / "other", seed=1)


def manual_nll(model, prompt_ids, completion_ids):
    """Straightforward per-sequence computation, no batching or padding."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
    total = 0.0
    for t in range(len(prompt_ids), len(prompt_ids) + len(completion_ids)):
        total -= float(logp[t - 1, ids[0, t]])
    return total / len(completion_ids)


def test_nll_matches_manual_computation_across_padded_batches(tiny):
    model, tok = load_model(tiny[0])
    prompts = ["What is 1 + 1?", "maze: go up", "Please reason step by step, and put your final answer"]
    completions = [" \\boxed{2}", " go left, go down, go right. path found.", " 12"]
    pairs = tokenize_pairs(tok, prompts, completions)
    want = np.array([manual_nll(model, p, c) for p, c in pairs])
    for budget in (10_000, 1):  # one padded batch, then one sequence per batch
        got = length_normalised_nll(model, pairs, max_tokens_per_batch=budget)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.all(want > 0)
    with pytest.raises(ValueError, match="at least one token"):
        length_normalised_nll(model, [(pairs[0][0], [])])


def test_select_rare_takes_the_top_fraction():
    nll = np.array([0.5, 3.0, 1.0, 3.0, 2.0] * 40)  # 200 values
    idx = select_rare(nll, 0.01)
    assert list(idx) == [1, 3]  # ceil(2.0) = 2 highest, ties in input order
    assert len(select_rare(nll, 0.012)) == 3
    assert list(select_rare(np.array([1.0]), 0.01)) == [0]
    with pytest.raises(ValueError, match="fraction"):
        select_rare(nll, 0.0)


def _rollouts(path):
    lines = [
        {"run": "base", "benchmark": "train", "problem_id": 0, "prompt": "What is 1 + 1?",
         "completions": [" \\boxed{2}", " \\boxed{3}", " it is 2, so \\boxed{2}", " maze: go up"],
         "correct": [1, 0, 1, 1]},
        {"run": "base", "benchmark": "train", "problem_id": 1, "prompt": "maze: find the path.",
         "completions": [" go up, go left. path found.", " nothing", " go right", "go down, go down"],
         "correct": [1, 0, 1, 1]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


def test_rare_nll_cli_builds_the_set_and_unchanged_checkpoint_gives_zero(tiny, tmp_path):
    base, other = tiny
    lines = _rollouts(tmp_path / "rollouts.jsonl")
    out = tmp_path / "out"
    rc = main(["rare-nll", "--rollouts", str(tmp_path / "rollouts.jsonl"), "--base", str(base), "--top-fraction", "0.5",
               "--model", f"same={base}", "--model", f"other={other}", "--out", str(out)])
    assert rc == 0

    rare_lines = [json.loads(x) for x in (out / "rare_set.jsonl").read_text().splitlines()]
    stats, rare = rare_lines[0]["_stats"], rare_lines[1:]
    assert stats["correct_trajectories"] == 6 and stats["rare_trajectories"] == 3

    # independent check: the 3 highest base-NLL correct completions, none of the incorrect ones
    model, tok = load_model(base)
    correct = [(line["prompt"], c) for line in lines for c, ok in zip(line["completions"], line["correct"]) if ok]
    nll = [manual_nll(model, *tokenize_pairs(tok, [p], [c])[0]) for p, c in correct]
    top = sorted(range(6), key=lambda i: -nll[i])[:3]
    assert [r["completion"] for r in rare] == [correct[i][1] for i in top]
    assert [r["base_nll"] for r in rare] == pytest.approx([nll[i] for i in top], rel=1e-5)
    assert all(r["completion"] not in (" \\boxed{3}", " nothing") for r in rare)

    rows = {r["model"]: r for r in csv.DictReader((out / "rare_nll.csv").open())}
    assert abs(float(rows["same"]["delta_nll"])) < 1e-5
    other_model, _ = load_model(other)
    want = np.mean([manual_nll(other_model, *tokenize_pairs(tok, [r["prompt"]], [r["completion"]])[0]) - r["base_nll"]
                    for r in rare])
    assert float(rows["other"]["delta_nll"]) == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert abs(want) > 1e-3  # a different model really does move the NLL

    # reuse the fixed set without the base model
    rc = main(["rare-nll", "--rare-set", str(out / "rare_set.jsonl"), "--model", f"other={other}", "--out", str(tmp_path / "o2")])
    assert rc == 0
    again = next(csv.DictReader((tmp_path / "o2" / "rare_nll.csv").open()))
    assert float(again["delta_nll"]) == pytest.approx(float(rows["other"]["delta_nll"]), abs=1e-6)


def test_rare_nll_cli_rejects_rollouts_without_prompts(tiny, tmp_path, capsys):
    (tmp_path / "r.jsonl").write_text(json.dumps({"run": "b", "benchmark": "t", "problem_id": 0,
                                                  "completions": ["x"], "correct": [1]}) + "\n")
    assert main(["rare-nll", "--rollouts", str(tmp_path / "r.jsonl"), "--base", str(tiny[0]), "--out", str(tmp_path / "o")]) == 2
    assert "needs 'prompt'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, line", [
    (["--max-tokens-per-batch", "0"], "--max-tokens-per-batch must be >= 1, got 0"),
    (["--rare-set", "{tmp}/missing.jsonl"], "--rare-set {tmp}/missing.jsonl: no such file"),
])
def test_rare_nll_bad_input_is_one_line_and_exit_2(argv, line, tmp_path, capsys):
    """rare-nll raises and leaves the line and the exit status to fgrpo_verl/cli/errors.py (--debug: the traceback)."""
    argv = ["rare-nll", *(a.format(tmp=tmp_path) for a in argv), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"fgrpo-verl rare-nll: error: {line.format(tmp=tmp_path)}\n"
    with pytest.raises(ValueError):
        main(["--debug", *argv])


def test_eval_generates_with_transformers_on_cpu_without_vllm(tiny, tmp_path):
    import types

    scorer = types.ModuleType("tiny_eval_scorer")
    # deterministic, content-based rule: "correct" iff the completion has an even number of characters
    scorer.score = lambda data_source, solution_str, ground_truth, extra_info=None: len(solution_str) % 2 == 0
    sys.modules["tiny_eval_scorer"] = scorer
    bench = tmp_path / "b.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "problem": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                             for i in range(3)))

    out = tmp_path / "out"
    try:
        assert main(["eval", "--model", f"tiny={tiny[0]}", "--bench", f"toy={bench}", "--backend", "transformers",
                     "--n", "4", "--max-new-tokens", "6", "--scorer", "tiny_eval_scorer:score", "--out", str(out),
                     "--no-plots", "--batch-size", "2", "--problems-per-call", "2"]) == 0
    finally:
        del sys.modules["tiny_eval_scorer"]
    # vLLM is installed here (backend=cpu_vllm) and verl imports it on its own, so "without vLLM" is checked in a
    # fresh process: the transformers path must not import it
    code = ("import sys; from fgrpo_verl.cli import main; rc = main(sys.argv[1:]); "
            "print('vllm imported' if 'vllm' in sys.modules else 'no vllm'); sys.exit(rc)")
    fresh = subprocess.run([sys.executable, "-c", code, "eval", "--model", f"tiny={tiny[0]}", "--bench", f"toy={bench}",
                            "--backend", "transformers", "--n", "2", "--max-new-tokens", "4", "--scorer", "boxed",
                            "--out", str(tmp_path / "fresh"), "--no-plots"], capture_output=True, text=True, timeout=300)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert fresh.stdout.splitlines()[-1] == "no vllm"
    gens = read_generations(out / "generations.jsonl")
    assert [g.problem_id for g in gens] == ["0", "1", "2"]
    for g in gens:
        assert len(g.completions) == 4 and g.prompt.endswith("<|im_start|>assistant\n")
        assert "Please reason step by step" in g.prompt
        assert list(g.correct) == [int(len(t) % 2 == 0) for t in g.completions]
    c = np.array([int(g.correct.sum()) for g in gens])
    rows = list(csv.DictReader((out / "pass_at_k_long.csv").open()))
    assert float(rows[0]["pass_at_k"]) == pytest.approx(c.mean() / 4)

    # seeds: each problem's samples are those of its own request seed, whatever else is in the engine call
    sampler = TransformersSampler(tiny[0], batch_size=2)  # --batch-size is part of a CPU sample stream
    setting = prompt_setting("qwen2.5-7b", "math")
    requests = [Request(encode_prompt({"id": g.problem_id, "problem": f"What is {i} + 1?"}, sampler.tokenizer, setting)[0],
                        4, request_seed(0, "tiny", "toy", g.problem_id, 0)) for i, g in enumerate(gens)]
    params = dict(temperature=1.0, top_p=1.0, max_new_tokens=6)
    assert sampler.sample(requests[1::-1], **params)[::-1] == [g.completions for g in gens[:2]]
    other = Request(requests[0].prompt_ids, 4, request_seed(1, "tiny", "toy", "0", 0))  # --seed 1
    assert sampler.sample([other], **params)[0] != gens[0].completions


def test_vllm_gets_token_ids_and_one_seeded_request_per_sample_block(tiny, tmp_path, monkeypatch):
    """No GPU/vLLM here: a stand-in `vllm` package records what our sampler asks of vLLM's offline API."""
    monkeypatch.setenv("FAKE_VLLM_LOG", str(tmp_path / "calls.jsonl"))
    bench = tmp_path / "b.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "problem": f"q{i}", "answer": str(i)}) + "\n" for i in range(3)))
    out = tmp_path / "out"
    with fake_vllm_imported(tmp_path / "fake"):
        rc = main(["eval", "--model", f"m={tiny[0]}", "--bench", f"B={bench}", "--n", "6", "--samples-per-request", "4",
                   "--max-new-tokens", "16", "--seed", "7", "--vllm-engine-args", '{"enforce_eager": true}',
                   "--problems-per-call", "2", "--scorer", "boxed", "--out", str(out), "--no-plots"])
    assert rc == 0
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert calls[0]["engine"]["model"] == str(tiny[0]) and calls[0]["engine"]["enforce_eager"] is True
    generate_calls = [c["generate"] for c in calls[1:]]
    assert [len(g) for g in generate_calls] == [4, 2]  # 2 problems x 2 blocks (4 + 2 samples), then 1 problem
    tok = AutoTokenizer.from_pretrained(str(tiny[0]))
    setting = prompt_setting("qwen2.5-7b", "math")
    requests = [r for g in generate_calls for r in g]
    for i, pid in enumerate(["0", "0", "1", "1", "2", "2"]):
        ids, _ = encode_prompt({"id": pid, "problem": f"q{pid}"}, tok, setting)
        assert requests[i]["prompt"] == {"prompt_token_ids": ids}  # token ids, never text
        block = i % 2
        assert requests[i]["params"] == dict(n=4 if block == 0 else 2, temperature=1.0, top_p=1.0, max_tokens=16,
                                             seed=request_seed(7, "m", "B", pid, block), skip_special_tokens=True)
    seeds = [r["params"]["seed"] for r in requests]
    assert len(set(seeds)) == len(seeds)  # no two requests share a random stream
    gens = read_generations(out / "generations.jsonl")
    assert [len(g.completions) for g in gens] == [6, 6, 6]


def test_rare_set_round_trips_completions_with_unicode_line_separators(tmp_path):
    """A sampled completion may hold U+2028 / U+2029 / U+0085 (written raw with ensure_ascii=False); reading the
    rare set back (--rare-set) must split records only at "\\n"."""
    from fgrpo_verl.evaluation.rare_nll import RareTrajectory, read_rare_set, write_rare_set

    rare = [RareTrajectory("r", "b", "p\u2028", 3, "prompt\u2029", "a\u2028b\x85c", 1.5),
            RareTrajectory("r", "b", "q", 0, "x", "y", 0.5)]
    path = tmp_path / "rare_set.jsonl"
    write_rare_set(path, rare, {"count": 2})
    assert read_rare_set(path) == (rare, {"count": 2})


def test_transformers_sampler_ignores_the_checkpoints_sampling_defaults(tiny, tmp_path):
    """A checkpoint's generation_config.json may set repetition_penalty / no_repeat_ngram_size / min_p (Qwen2.5
    Instruct ships repetition_penalty 1.05); transformers' generate applies whatever is not passed explicitly. The
    paper samples plain T = 1, top-p 1 (and vLLM, given explicit SamplingParams, ignores them), so the CPU back-end
    must too: same weights and seed, with or without those defaults, give the same samples."""
    import shutil

    from transformers import GenerationConfig

    plain = tiny[0]
    skewed = tmp_path / "skewed"
    shutil.copytree(plain, skewed)
    config = GenerationConfig.from_pretrained(plain)
    config.update(do_sample=True, repetition_penalty=5.0, no_repeat_ngram_size=1, min_p=0.2)
    config.save_pretrained(skewed)
    tok = AutoTokenizer.from_pretrained(str(plain))
    ids, _ = encode_prompt({"id": "0", "problem": "What is 1 + 1?"}, tok, prompt_setting("none", "math"))
    req = [Request(ids, 4, 123)]
    got = {}
    for name, path in (("plain", plain), ("skewed", skewed)):
        sampler = TransformersSampler(path, batch_size=4)
        got[name] = sampler.sample(req, temperature=1.0, top_p=1.0, max_new_tokens=12)
    assert got["plain"] == got["skewed"]
    assert any(len(t) > 0 for t in got["plain"][0])
