"""Maze task: generator, formats, reward, tokenizer, parquet, model size, SFT smoke test."""

from __future__ import annotations

import itertools

import pytest

from fgrpo_verl.tasks.maze.generator import (
    GOAL, MOVES, START, WALL, generate_maze, generate_split, max_possible_path_length,
)
from fgrpo_verl.tasks.maze.data import parse_grid, prompt_text, response_text
from fgrpo_verl.tasks.maze.reward import compute_score


# ---------------------------------------------------------------- independent checks (no generator code)
def _open_squares(rows):
    return {(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch != WALL}


def _count_simple_paths(rows, a, b):
    """Count simple paths a -> b by exhaustive DFS (independent of the generator's BFS)."""
    free = _open_squares(rows)
    count = 0
    stack = [(a, frozenset([a]))]
    while stack:
        pos, seen = stack.pop()
        if pos == b:
            count += 1
            continue
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            nxt = (pos[0] + dr, pos[1] + dc)
            if nxt in free and nxt not in seen:
                stack.append((nxt, seen | {nxt}))
    return count


def _walk(rows, start, actions):
    pos = start
    for a in actions:
        pos = (pos[0] + MOVES[a][0], pos[1] + MOVES[a][1])
        assert rows[pos[0]][pos[1]] != WALL
    return pos


@pytest.mark.parametrize("size", [5, 7, 9, 11])
def test_generator_perfect_maze_unique_path(size):
    for seed in range(15):
        m = generate_maze(size, seed)
        assert m.size == size and all(len(r) == size for r in m.rows)
        assert set("".join(m.rows)) <= {WALL, ".", START, GOAL}
        assert "".join(m.rows).count(START) == 1 and "".join(m.rows).count(GOAL) == 1
        assert all(ch == WALL for ch in m.rows[0] + m.rows[-1] + "".join(r[0] + r[-1] for r in m.rows))
        free = _open_squares(m.rows)
        n_cells = ((size - 1) // 2) ** 2
        # spanning tree: all cells open plus exactly n_cells - 1 opened walls
        assert len(free) == 2 * n_cells - 1
        assert m.rows[m.start[0]][m.start[1]] == START and m.rows[m.goal[0]][m.goal[1]] == GOAL
        assert _walk(m.rows, m.start, m.path) == m.goal
        assert len(m.path) <= max_possible_path_length(size)
        assert _count_simple_paths(m.rows, m.start, m.goal) == 1


def test_generator_all_squares_reachable_and_unique_paths_between_random_pairs():
    m = generate_maze(9, 3)
    free = sorted(_open_squares(m.rows))
    for a, b in itertools.islice(itertools.combinations(free, 2), 0, 400, 7):
        assert _count_simple_paths(m.rows, a, b) == 1


def test_generator_deterministic_and_seed_sensitive():
    assert generate_maze(17, 123) == generate_maze(17, 123)
    assert generate_maze(17, "0:train:5") == generate_maze(17, "0:train:5")
    assert len({generate_maze(17, s).key() for s in range(20)}) == 20


@pytest.mark.parametrize("bad", [4, 3, 1, 0, -7, 16, 17.0, "17", True, None])
def test_generator_bad_size(bad):
    with pytest.raises(ValueError, match="size"):
        generate_maze(bad, 0)


def test_splits_disjoint_and_deterministic():
    from fgrpo_verl.tasks.maze.data import make_splits

    a = make_splits(7, 300, 50, seed=1)
    b = make_splits(7, 300, 50, seed=1)
    assert a == b
    val_keys = {m.key() for m in a.val}
    train_keys = {m.key() for m in a.train}
    assert len(val_keys) == 50 and len(train_keys) == 300
    assert not val_keys & train_keys


def test_split_too_small_space_errors():
    # a 5x5 grid has 4 spanning trees x 12 start/goal pairs = 48 distinct mazes
    with pytest.raises(ValueError, match="too small"):
        generate_split(5, 100, 0, "train")


# ---------------------------------------------------------------- formats and reward
def test_prompt_round_trip():
    m = generate_maze(9, 0)
    assert parse_grid(prompt_text(m)) == m.rows
    assert prompt_text(m).endswith("\n>") and response_text(m) == m.path + "<|endoftext|>"


def test_reward_exact():
    m = generate_maze(11, 5)
    assert compute_score("maze", m.path, m.path) == 1.0
    assert compute_score("maze", m.path + "<|endoftext|><|endoftext|>", m.path) == 1.0  # skip_special_tokens=False decoding
    assert compute_score("maze", m.path[:-1], m.path) == 0.0
    assert compute_score("maze", m.path + m.path[-1], m.path) == 0.0
    assert compute_score("maze", "", m.path) == 0.0


def test_reward_malformed():
    m = generate_maze(11, 5)
    info = {"maze": prompt_text(m)}
    for bad in [None, 3, m.path + "x", " " + m.path, m.path.lower(), m.path[:2] + "<r0>" + m.path[2:], "<unk>"]:
        assert compute_score("maze", bad, m.path, info) == 0.0
        assert compute_score("maze", bad, m.path, info, rule="reach") == 0.0
    with pytest.raises(ValueError, match="rule"):
        compute_score("maze", m.path, m.path, info, rule="exactly")
    with pytest.raises(ValueError, match="extra_info"):
        compute_score("maze", m.path, m.path, None, rule="reach")


def test_reward_reach_rule_wall_hit_and_detour():
    m = generate_maze(11, 5)
    info = {"maze": prompt_text(m)}
    assert compute_score("maze", m.path, m.path, info, rule="reach") == 1.0
    # walk the path, but bump into a wall somewhere first: find a wall next to the start
    for action, (dr, dc) in MOVES.items():
        if m.rows[m.start[0] + dr][m.start[1] + dc] == WALL:
            assert compute_score("maze", action + m.path, m.path, info, rule="reach") == 0.0
            break
    else:
        pytest.fail("start square has no neighbouring wall")
    # a detour (one step out and back on an open square) reaches the goal: reach accepts, exact rejects
    inverse = {"U": "D", "D": "U", "L": "R", "R": "L"}
    first = m.path[0]
    detour = first + inverse[first] + m.path
    assert compute_score("maze", detour, m.path, info, rule="reach") == 1.0
    assert compute_score("maze", detour, m.path, info, rule="exact") == 0.0
    # stopping short of the goal fails
    assert compute_score("maze", m.path[:-1], m.path, info, rule="reach") == 0.0


# ---------------------------------------------------------------- tokenizer, parquet, model
def test_tokenizer_round_trip(tmp_path):
    from transformers import AutoTokenizer

    from fgrpo_verl.tasks.maze.model import build_model, save_model_dir
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer

    built = build_tokenizer()
    built.save_pretrained(str(tmp_path / "tok"))
    # the tokenizer-only dir and a full Qwen2 model dir (where transformers forces Qwen2Tokenizer) must agree
    save_model_dir(build_model("tiny", built, seed=0), built, tmp_path / "model")
    m = generate_maze(13, 2)
    text = prompt_text(m)
    for tok in (built, AutoTokenizer.from_pretrained(str(tmp_path / "tok")), AutoTokenizer.from_pretrained(str(tmp_path / "model"))):
        assert len(tok) == 32
        assert tok.eos_token == tok.pad_token == "<|endoftext|>" and tok.eos_token_id == 0
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) == len(text)  # one character, one token
        assert tok.decode(ids) == text
        resp = tok.encode(response_text(m), add_special_tokens=False)
        assert resp[-1] == tok.eos_token_id and len(resp) == len(m.path) + 1
        assert tok.decode(resp, skip_special_tokens=True) == m.path
        # what verl needs: a chat template that reproduces the prompt, "\n" as one token, <|im_end|> known
        chat = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
        chat_ids = chat["input_ids"] if hasattr(chat, "keys") else chat
        assert list(chat_ids) == ids
        assert len(tok.encode("\n", add_special_tokens=False)) == 1
        assert tok.convert_tokens_to_ids("<|im_end|>") == 1
        # every id decodes to visible text except the termination token, so a stray token cannot vanish
        for i in range(1, 32):
            assert tok.decode([i], skip_special_tokens=True) != ""


def test_parquet_schema(tmp_path):
    import pandas as pd

    from fgrpo_verl.tasks.maze.data import make_splits, write_parquet

    splits = make_splits(9, 20, 5, seed=0)
    path = write_parquet(splits.train, "train", tmp_path / "train.parquet")
    df = pd.read_parquet(path)
    assert list(df.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert len(df) == 20
    row = df.iloc[3]
    assert row.data_source == "maze"
    msgs = list(row.prompt)
    assert len(msgs) == 1 and msgs[0]["role"] == "user" and msgs[0]["content"] == prompt_text(splits.train[3])
    assert row.reward_model["style"] == "rule" and row.reward_model["ground_truth"] == splits.train[3].path
    assert row.extra_info["index"] == 3 and row.extra_info["split"] == "train"
    assert compute_score(row.data_source, splits.train[3].path, row.reward_model["ground_truth"], row.extra_info, rule="reach") == 1.0


def test_paper_model_size_and_bad_preset():
    from fgrpo_verl.tasks.maze.model import build_model
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer

    tok = build_tokenizer()
    model = build_model("paper", tok, seed=0)
    n = sum(p.numel() for p in model.parameters())
    assert 3.0e6 <= n <= 4.0e6, n  # paper: "~3M"
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads) == (256, 4, 4, 2)
    assert (c.intermediate_size, c.vocab_size, c.max_position_embeddings) == (1024, 32, 512)
    with pytest.raises(ValueError, match="preset"):
        build_model("huge", tok, seed=0)


def test_build_dir_loads_offline(tmp_path):
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fgrpo_verl.tasks.maze import build

    b = build(tmp_path, size=7, n_train=40, n_val=8, model_preset="tiny", seed=0)
    assert json.loads((tmp_path / "build.json").read_text())["prompt_length"] == 7 * 8 + 1 == b.prompt_length
    assert b.max_response_length == max_possible_path_length(7) + 1 > b.max_path_length
    tok = AutoTokenizer.from_pretrained(b.model_dir)
    model = AutoModelForCausalLM.from_pretrained(b.model_dir)
    assert model.config.model_type == "qwen2" and model.config.eos_token_id == tok.eos_token_id


# ---------------------------------------------------------------- SFT and evaluation
def test_sft_smoke_loss_decreases_and_only_response_is_supervised():
    import torch

    from fgrpo_verl.tasks.maze.data import make_splits
    from fgrpo_verl.tasks.maze.model import build_model
    from fgrpo_verl.tasks.maze.sft import SFTConfig, encode_examples, sft
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer

    torch.set_num_threads(1)
    tok = build_tokenizer()
    mazes = make_splits(7, 64, 4, seed=0).train
    ids, labels = encode_examples(mazes[:2], tok)
    prompt_len = len(prompt_text(mazes[0]))
    assert (labels[:, :prompt_len] == -100).all()
    assert labels[0, prompt_len : prompt_len + len(mazes[0].path) + 1].tolist() == tok.encode(
        response_text(mazes[0]), add_special_tokens=False
    )
    model = build_model("tiny", tok, seed=0)
    losses = sft(model, tok, mazes, SFTConfig(steps=40, batch_size=16, lr=3e-3, log_every=0))
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5, losses


@pytest.mark.parametrize("bad", [dict(steps=0), dict(batch_size=-1), dict(lr=0.0), dict(lr=float("nan")), dict(steps=1.5)])
def test_sft_config_rejects_bad_values(bad):
    from fgrpo_verl.tasks.maze.sft import SFTConfig

    with pytest.raises(ValueError, match="SFTConfig"):
        SFTConfig(**bad)


def test_evaluate_counts_match_reward():
    """A model that always answers the target scores n/n; a random model almost never does on 9x9 mazes."""
    import torch

    from fgrpo_verl.tasks.maze.evaluate import evaluate, sample_correct_counts
    from fgrpo_verl.tasks.maze.model import build_model
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer

    tok = build_tokenizer()
    mazes = [generate_maze(9, s) for s in range(3)]
    model = build_model("tiny", tok, seed=0)
    counts = sample_correct_counts(model, tok, [prompt_text(m) for m in mazes], [m.path for m in mazes],
                                   lambda text, truth: compute_score("maze", text, truth), 4,
                                   max_possible_path_length(9) + 1, batch_size=5)
    assert len(counts) == 3 and all(0 <= c <= 4 for c in counts)

    class Oracle(torch.nn.Module):
        """Emits the target response of whichever maze it is prompted with (logits put all mass on it)."""

        def __init__(self):
            super().__init__()
            self.targets = {tuple(tok.encode(prompt_text(m), add_special_tokens=False)): tok.encode(response_text(m), add_special_tokens=False) for m in mazes}

        def generate(self, input_ids, max_new_tokens, **kw):
            rows = []
            for row in input_ids.tolist():
                resp = self.targets[tuple(row)]
                rows.append(row + resp + [tok.eos_token_id] * (max_new_tokens - len(resp)))
            return torch.tensor(rows)

    result = evaluate(Oracle(), tok, mazes, n=4, ks=[1, 4])
    assert result.correct == [4, 4, 4] and result.pass_at == {1: 1.0, 4: 1.0}


def test_run_outputs_are_read_back(tmp_path):
    import json

    from fgrpo_verl.tasks.maze.rl import correct_counts_from_dump, read_metrics

    (tmp_path / "m.jsonl").write_text(
        "".join(json.dumps({"step": s, "data": {"critic/score/mean": s / 10}}) + "\n" for s in (1, 2, 3))
    )
    assert read_metrics(tmp_path / "m.jsonl")[2]["critic/score/mean"] == 0.2
    dump = [{"input": p, "output": "R", "score": sc} for p, sc in [("a", 1.0), ("a", 0.0), ("b", 0.0), ("b", 0.0)]]
    (tmp_path / "v.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dump))
    assert correct_counts_from_dump(tmp_path / "v.jsonl") == (2, [1, 0])
    (tmp_path / "u.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dump[:3]))
    with pytest.raises(ValueError, match="unequal"):
        correct_counts_from_dump(tmp_path / "u.jsonl")


def test_rl_overrides_compose_and_validate(tmp_path):
    """The demo's verl config (maze data, SFT model, fgrpo gamma, maze reward, cpu backend) passes verl's checks."""
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.validation import validate
    from fgrpo_verl.tasks.maze import build
    from fgrpo_verl.tasks.maze.rl import RLSettings, maze_overrides

    b = build(tmp_path / "maze", size=7, n_train=40, n_val=8, model_preset="tiny", seed=0)
    settings = RLSettings(steps=3, batch_size=4, n=2, val_n=2, micro_batch=8)
    cfg = compose(maze_overrides(b, b.model_dir, 0.5, settings, str(tmp_path / "run"), "t"))
    validate(cfg)
    assert cfg.algorithm.adv_estimator == "fgrpo" and cfg.algorithm.fgrpo.gamma == 0.5
    assert cfg.actor_rollout_ref.rollout.name == "hf"  # the cpu backend's rollout
    assert cfg.data.max_response_length == max_possible_path_length(7) + 1
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == cfg.data.train_batch_size == 4  # on-policy
    assert cfg.reward.custom_reward_function.path == "pkg://fgrpo_verl.tasks.maze.reward"
    with pytest.raises(ValueError, match="RLSettings.n"):
        RLSettings(n=0)
    with pytest.raises(ValueError, match="micro_batch"):
        RLSettings(batch_size=4, n=2, micro_batch=64)


# ---------------------------------------------------------------- the demo command
def test_demo_is_registered_and_rejects_bad_gammas(tmp_path, capsys):
    from fgrpo_verl.cli import build_parser, main
    from fgrpo_verl.cli.demo import fill_defaults

    assert main(["demo", "--task", "maze", "--out-dir", str(tmp_path), "--gammas", "0,half"]) == 2
    assert "argument --gammas: must be comma-separated numbers, got '0,half'" in capsys.readouterr().err
    args = fill_defaults(build_parser().parse_args(["demo", "--task", "maze", "--gammas", "0,1.5", "--lr", "3e-4"]))
    assert args.size == 7 and args.gammas == [0.0, 1.5] and args.lr == 3e-4
    assert args.model_preset == "small" and args.rl_steps == 30  # the maze defaults fill what the command line left out
    args = fill_defaults(build_parser().parse_args(["demo", "--full", "--seeds", "2"]))
    assert (args.model_preset, args.seeds, args.gammas, args.control_gamma) == ("tiny", 2, [0.0, 0.5, 1.0], 1.0)


@pytest.mark.e2e
@pytest.mark.ray
def test_demo_end_to_end_tiny(tmp_path, capsys):
    """The whole demo at toy scale: build, SFT, F-GRPO through verl on the CPU backend, table and plot. One run
    (γ = 0.5), one RL step: the last step's validation dump is what the table reads. Not run here, each at the
    cost of another verl start-up: the default two γ (a second run from the same process, a γ = 0 run named
    ``grpo``, a table of two rows and a plot of two curves)."""
    from fgrpo_verl.cli import main

    rc = main([
        "demo", "--task", "maze", "--out-dir", str(tmp_path), "--size", "7", "--n-train", "64", "--n-val", "4",
        "--model-preset", "tiny", "--sft-steps", "20", "--rl-steps", "1", "--batch-size", "4", "--n", "2",
        "--val-n", "2", "--gammas", "0.5",
    ])
    out = capsys.readouterr().out
    assert rc == 0, out[-4000:]
    assert (tmp_path / "runs" / "fgrpo_gamma0.5" / "validation" / "1.jsonl").is_file()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["fgrpo_gamma0.5"]
    row = next(line for line in out.splitlines() if line.startswith("fgrpo_gamma0.5 "))
    assert "FAILED" not in row and len(row.split()) == 2 + 3 + 2, row  # name, γ, "start -> end", pass@1, pass@2
    assert "pass@2" in out and (tmp_path / "reward_curves.png").stat().st_size > 0


def test_build_cli_with_sft_writes_a_trained_model(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from fgrpo_verl.tasks.maze.__main__ import main

    rc = main([str(tmp_path), "--size", "7", "--n-train", "40", "--n-val", "4", "--model-preset", "tiny", "--sft",
               "--sft-steps", "3", "--sft-batch-size", "4", "--sft-log-every", "0"])
    assert rc == 0
    init = AutoModelForCausalLM.from_pretrained(tmp_path / "init_model")
    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "sft_model")
    changed = [n for (n, a), (_, b) in zip(init.named_parameters(), tuned.named_parameters()) if not torch.equal(a, b)]
    assert changed, "SFT left every parameter unchanged"
