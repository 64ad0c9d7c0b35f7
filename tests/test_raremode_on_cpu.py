"""The rare-mode task: generator, warm-start distribution, tokenizer, reward, exact mass vs sampling, statistics."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from fgrpo_verl.tasks.raremode.generator import (
    SYMBOLS,
    RarePrompt,
    WarmStart,
    distractor,
    generate_split,
    n_distinct_prompts,
    sample_warm_answer,
    warm_start_distribution,
)
from fgrpo_verl.tasks.raremode.reward import compute_score


# ---------------------------------------------------------------- generator and splits
def test_splits_are_distinct_deterministic_and_disjoint():
    from fgrpo_verl.tasks.raremode.build import make_splits

    a, b = make_splits(4, 300, 50, seed=3), make_splits(4, 300, 50, seed=3)
    assert a == b
    assert make_splits(4, 300, 50, seed=4).val != a.val
    train = {p.symbols for p in a.train}
    assert len(train) == 300 and len({p.symbols for p in a.val}) == 50
    assert not train & {p.symbols for p in a.val}
    for p in a.train + a.val:
        assert len(set(p.symbols)) == 4 and set(p.symbols) <= set(SYMBOLS)
        assert p.text == "".join(p.symbols) + ">"


@pytest.mark.parametrize("k", [1, 11, 2.0, True, "4"])
def test_bad_k_is_rejected(k):
    with pytest.raises(ValueError, match="k"):
        generate_split(k, 3, 0, "train")


def test_asking_for_more_prompts_than_exist_fails():
    assert n_distinct_prompts(2) == 20 * 19
    with pytest.raises(ValueError, match="only 380 exist"):
        generate_split(2, 381, 0, "train")
    with pytest.raises(ValueError, match="count"):
        generate_split(2, 0, 0, "train")


def test_warm_start_distribution():
    warm = WarmStart(anchor=0.3, rare=0.09, distractor=0.5)
    p = RarePrompt(tuple("tbcs"))
    dist = warm_start_distribution(p, warm)
    assert math.isclose(sum(dist.values()), 1.0) and set(dist) == set(SYMBOLS)
    assert dist["t"] == 0.3 and all(math.isclose(dist[s], 0.03) for s in "bcs")
    assert distractor(p) == "a"  # after t wrap to a; a is not in the prompt
    assert distractor(RarePrompt(tuple("abcd"))) == "e" and dist["a"] == 0.5
    rng = random.Random(0)
    draws = [sample_warm_answer(p, warm, rng) for _ in range(20000)]
    assert abs(draws.count("t") / 20000 - 0.3) < 0.02 and abs(draws.count("a") / 20000 - 0.5) < 0.02


@pytest.mark.parametrize("kwargs", [dict(anchor=0.0), dict(rare=-0.1), dict(anchor=0.6, rare=0.2, distractor=0.3),
                                    dict(anchor="0.3"), dict(distractor=True)])
def test_bad_warm_start_is_rejected(kwargs):
    with pytest.raises(ValueError, match="WarmStart"):
        WarmStart(**kwargs)


# ---------------------------------------------------------------- tokenizer and reward
def test_tokenizer_one_token_per_character_and_model_dir_roundtrip(tmp_path):
    from transformers import AutoTokenizer

    from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
    from fgrpo_verl.tasks.raremode.generator import build_tokenizer

    tok = build_tokenizer()
    text = "dkqa>"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == 5 and tok.decode(ids) == text
    assert len(set(tok.encode("".join(SYMBOLS), add_special_tokens=False))) == 20
    assert tok.encode("\n", add_special_tokens=False) == [3]
    save_model_dir(build_model("tiny", tok, 0), tok, tmp_path / "m")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert loaded.encode(text + "\n", add_special_tokens=False) == tok.encode(text + "\n", add_special_tokens=False)
    assert loaded.apply_chat_template([{"role": "user", "content": text}], tokenize=False) == text


@pytest.mark.parametrize(
    "response,score",
    [("a", 1.0), ("d", 1.0), ("e", 0.0), ("ab", 0.0), ("", 0.0), ("a<|endoftext|><|endoftext|>", 1.0),
     ("<r0>", 0.0), (">", 0.0), ("A", 0.0), (None, 0.0), (" a", 0.0)],
)
def test_reward(response, score):
    assert compute_score("raremode", response, "abcd") == score


def test_reward_rejects_a_bad_ground_truth():
    with pytest.raises(ValueError, match="ground_truth"):
        compute_score("raremode", "a", "")
    with pytest.raises(ValueError, match="ground_truth"):
        compute_score("raremode", "a", ["a"])


# ---------------------------------------------------------------- exact mass
def test_exact_probabilities_match_sampling_frequencies():
    """Teacher-forced candidate probabilities equal the frequencies of the same answers among samples from the
    policy (the held-out sampler of pass@k; 5 sigma), and Q_pos equals the sampled success rate under the reward."""
    from fgrpo_verl.tasks.maze.model import build_model
    from fgrpo_verl.tasks.maze.evaluate import sample_correct_counts
    from fgrpo_verl.tasks.raremode.measure import candidate_probs
    from fgrpo_verl.tasks.maze.sft import SFTConfig
    from fgrpo_verl.tasks.raremode.generator import build_tokenizer, sft

    tok = build_tokenizer()
    prompts = generate_split(3, 40, 0, "train")
    model = build_model("tiny", tok, 0)
    sft(model, tok, prompts, WarmStart(anchor=0.4, rare=0.2, distractor=0.2), SFTConfig(steps=40, lr=3e-3))
    probe = prompts[:3]
    exact = candidate_probs(model, tok, probe)
    n = 6000
    texts = {}

    def score(text, truth):  # every sampled response, by its prompt's correct set (distinct per prompt)
        texts.setdefault(truth, []).append(text)
        return compute_score("raremode", text, truth)

    truths = ["".join(p.correct) for p in probe]
    counts = sample_correct_counts(model, tok, [p.text for p in probe], truths, score, n, 2, batch_size=4096, seed=2)
    for i, (p, truth) in enumerate(zip(probe, truths)):
        assert len(texts[truth]) == n
        for j, a in enumerate(p.correct):
            q = exact.probs[i, j]
            freq = texts[truth].count(a) / n
            assert abs(freq - q) < 5 * math.sqrt(q * (1 - q) / n) + 1e-9, (p, a, freq, q)
    for c, q in zip(counts, exact.q_pos):
        assert abs(c / n - q) < 5 * math.sqrt(q * (1 - q) / n)


def test_exact_metrics_follow_eq26_and_app_m2():
    from fgrpo_verl.tasks.raremode.measure import Candidates, exact_metrics, rare_mask

    base = Candidates(np.array([[0.5, 0.05, 0.05], [0.6, 0.1, 0.02]]))
    rare = rare_mask(base, 0.2)  # < 0.2 * Q_pos: 0.12 and 0.144
    assert rare.tolist() == [[False, True, True], [False, True, True]]
    now = Candidates(np.array([[0.7, 0.01, 0.08], [0.6, 0.1, 0.02]]))
    m = exact_metrics(base, now, rare)
    assert math.isclose(m.m_ret, ((1 - 0.04 / 0.10) + 1.0) / 2)
    assert math.isclose(m.q_pos, (0.79 + 0.72) / 2)
    expected_dnll = np.mean([np.log(0.05 / 0.01) / 2, np.log(0.05 / 0.08) / 2, 0.0, 0.0])
    assert math.isclose(m.delta_nll_rare, expected_dnll)
    assert math.isclose(m.anchor_mass, (0.7 + 0.6) / 2)
    assert exact_metrics(base, base, rare).m_ret == 1.0
    with pytest.raises(ValueError, match="rare_share"):
        rare_mask(base, 0.0)
    with pytest.raises(ValueError, match="no held-out prompt"):
        exact_metrics(base, now, np.zeros_like(rare))


# ---------------------------------------------------------------- statistics, configurations, checkpoints
@pytest.mark.parametrize("p", [0.9, 0.975, 0.995])
def test_t_quantile_matches_closed_forms(p):
    from fgrpo_verl.tasks.raremode.report import t_quantile

    assert math.isclose(t_quantile(p, 1), math.tan(math.pi * (p - 0.5)), rel_tol=1e-6)
    assert math.isclose(t_quantile(p, 2), (2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel_tol=1e-6)
    assert t_quantile(p, 200) == pytest.approx(t_quantile(p, 100000), rel=2e-2)


def test_intervals_and_paired_difference():
    from fgrpo_verl.tasks.raremode.report import paired_difference, t_interval

    iv = t_interval([1.0, 2.0, 3.0])
    assert iv.mean == 2.0 and math.isclose(iv.half_width, 4.302652729 * 1.0 / math.sqrt(3), rel_tol=1e-6)
    single = t_interval([0.5])
    assert math.isnan(single.half_width) and not single.excludes_zero and str(single) == "0.500"
    # a shared seed effect cancels in the paired difference
    d = paired_difference([0.31, 0.51, 0.71], [0.30, 0.50, 0.70])
    assert math.isclose(d.mean, 0.01) and d.half_width < 1e-9 and d.excludes_zero
    with pytest.raises(ValueError, match="one value per seed"):
        paired_difference([1.0, 2.0], [1.0])


def test_configurations_include_the_scale_matched_control():
    from fgrpo_verl.tasks.raremode.experiment import configs, run_overrides

    cs = configs([0.0, 1.0], 1e-3, 1.0)
    assert [c.name for c in cs] == ["grpo", "fgrpo_g1", "grpo_lr_x_m1"]
    assert cs[2].gamma == 0.0 and math.isclose(cs[2].lr, 5e-4)  # m_1 = 0.5 (App. N)
    with pytest.raises(ValueError, match="distinct"):
        configs([0.0, 0.0], 1e-3, None)
    ov = run_overrides(cs[1], 7)
    assert "algorithm.fgrpo.gamma=1.0" in ov and "data.seed=7" in ov and "trainer.save_freq=1" in ov


def test_step_metrics_score_each_checkpoint_verl_finished(tmp_path):
    """Every step up to verl's resume point is scored from its HF dir; a checkpoint past the resume point (still
    being written) is not read."""
    from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
    from fgrpo_verl.tasks.raremode.measure import candidate_probs, exact_metrics, rare_mask, step_metrics
    from fgrpo_verl.tasks.raremode.generator import build_tokenizer

    tok = build_tokenizer()
    prompts = generate_split(3, 4, 0, "val")
    models = {step: build_model("tiny", tok, step) for step in (0, 1, 2, 3)}
    for step in (1, 2, 3):
        save_model_dir(models[step], tok, tmp_path / f"global_step_{step}" / "actor" / "huggingface")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    base = candidate_probs(models[0], tok, prompts)
    rare = rare_mask(base, 1.0)
    curve = step_metrics(tmp_path, tok, prompts, base, rare)
    assert sorted(curve) == [0, 1, 2] and curve[0].m_ret == 1.0
    for step in (1, 2):
        assert curve[step] == exact_metrics(base, candidate_probs(models[step], tok, prompts), rare)
    (tmp_path / "latest_checkpointed_iteration.txt").unlink()
    with pytest.raises(FileNotFoundError, match="no complete"):
        step_metrics(tmp_path, tok, prompts, base, rare)


def test_the_bare_torch_measurement_moves_the_policy():
    """benchmarks/raremode_bare_torch.py, the script behind docs/raremode.md's bare-torch numbers, still runs."""
    import importlib.util

    import torch

    from fgrpo_verl.tasks.maze.model import build_model
    from fgrpo_verl.tasks.raremode.generator import build_tokenizer

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "raremode_bare_torch.py"
    spec = importlib.util.spec_from_file_location("raremode_bare_torch", path)
    bare = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bare  # its dataclass looks its module up there
    spec.loader.exec_module(bare)
    tok = build_tokenizer()
    model = build_model("tiny", tok, 0)
    before = [p.detach().clone() for p in model.parameters()]
    seen = []
    bare.run(model, tok, generate_split(4, 20, 0, "train"),
             bare.ProtoSettings(steps=2, batch_size=4, n=4, lr=1e-3, gamma=1.0), on_step=lambda step, m: seen.append(step))
    assert seen == [0, 1, 2]
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ---------------------------------------------------------------- the demo's argument checks
@pytest.mark.parametrize("argv,match", [(["--gammas", "1"], "include 0"),
                                        (["--gammas", "0,x"], "argument --gammas: must be comma-separated numbers"),
                                        (["--warm", "0.3,0.1"], "--warm"), (["--warm", "0.6,0.3,0.3"], "WarmStart"),
                                        (["--seeds", "0"], "--seeds"), (["--q-levels", "0.5,1"], "--q-levels=1.0 is invalid"),
                                        (["--q-levels", "0.5,x"], "argument --q-levels: must be comma-separated"),
                                        (["--q-levels", "0.5,0.5"], "repeats a level")])
def test_raremode_demo_rejects_bad_arguments(tmp_path, capsys, argv, match):
    from fgrpo_verl.cli import main

    assert main(["demo", "--out-dir", str(tmp_path), *argv]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "raremode").exists()  # rejected before building anything
