"""The paper's selection protocol (fgrpo_verl/evaluation/protocol.py) on constructed results whose
answer is known: best baseline checkpoint by math pass@1, best focal checkpoint with equal or less compute, γ by
math pass@1 of the final passes; and run directories read the way the final evaluation job and the report read
them (the report's choice of γ through run directories: tests/test_recipe_report_on_cpu.py)."""

import json
import os

from fgrpo_verl.job import checkpoints as ck
from fgrpo_verl.evaluation.plan import Steps
from fgrpo_verl.evaluation.protocol import (
    CheckpointScore, RunSelection, choose, compute_of, run_scores, select_baseline, select_focal, select_gamma,
)

BATCH, N = 256, 8


def scores(values: dict[int, float], n: int = N) -> list[CheckpointScore]:
    return [CheckpointScore(step, compute_of(step, BATCH, n), value) for step, value in values.items()]


def test_the_baseline_takes_its_best_checkpoint_and_ties_go_to_less_compute():
    base = select_baseline("grpo", scores({153: 0.30, 306: 0.37, 459: 0.35, 612: 0.37}))
    assert base.checkpoint.step == 306


def test_the_focal_checkpoint_is_the_best_one_with_equal_or_less_compute_than_the_baseline():
    base = select_baseline("grpo", scores({153: 0.30, 306: 0.37, 459: 0.35}))
    # its overall best (459) used more compute than the baseline's selected 306: not allowed
    focal = select_focal("fgrpo", scores({153: 0.33, 306: 0.36, 459: 0.40}), base)
    assert focal.checkpoint.step == 306 and "306" in focal.constraint
    # equal compute counts as allowed; the baseline's compute is the bound, not its step, when N differs
    base16 = select_baseline("grpo-n16", scores({153: 0.4}, n=16))
    assert select_focal("f", scores({153: 0.1, 306: 0.2}), base16).checkpoint.step == 306


def test_no_focal_checkpoint_qualifies_or_the_baseline_is_not_selected_yet():
    base = select_baseline("grpo", scores({100: 0.3}))
    assert select_focal("f", scores({153: 0.5}), base).checkpoint is None
    waiting = RunSelection("grpo", None, "not finished")
    assert select_focal("f", scores({153: 0.5}), waiting).checkpoint is None
    # without a baseline in the recipe: the best over all of its checkpoints, and the reason says so
    alone = select_focal("f", scores({153: 0.2, 306: 0.5}), None)
    assert alone.checkpoint.step == 306 and "no γ = 0 baseline" in alone.constraint


def test_gamma_is_chosen_by_the_final_passes_math_pass_at_1_ties_to_the_smaller_gamma():
    base = select_baseline("grpo", scores({153: 0.3, 306: 0.3}))
    focal = {g: select_focal(f"g{g}", scores(v), base) for g, v in
             {0.5: {153: 0.40, 306: 0.41}, 1.0: {153: 0.41, 306: 0.39}, 2.0: {153: 0.45, 306: 0.30}}.items()}
    # the baseline's best is 153 (tie, less compute): every focal run is limited to 153
    assert {g: s.checkpoint.step for g, s in focal.items()} == {0.5: 153, 1.0: 153, 2.0: 153}
    # the selection pass ranks γ = 2 first (0.45); the final passes of the selected checkpoints decide
    assert select_gamma({0.5: 0.43, 1.0: 0.42, 2.0: 0.40}) == 0.5
    assert select_gamma({1.0: 0.4, 0.5: 0.4}) == 0.5
    assert select_gamma({0.5: 0.4, 2.0: None}) is None  # γ = 2's final pass has not run: the choice could change
    assert select_gamma({}) is None


# ---- run directories -------------------------------------------------------------------------------------------
def make_run(root, name, steps, values, label="L", done=True, total=None, save_freq=2):
    """A run directory as the trainer and the evaluation jobs leave it: checkpoints, verl's tracker, the trainer's
    step record and one current selection result per scored checkpoint."""
    run = root / name
    total = total or max(steps)
    for step in steps:
        actor = run / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(os.urandom(16))
    (run / "latest_checkpointed_iteration.txt").write_text(str(total if done else max(steps)))
    ck.write_steps(run, save_freq, save_freq, total, 8, 4)
    for step, value in values.items():
        sig = ck.signature(run / f"global_step_{step}" / "actor")
        ck.write_json(ck.result_path(run, step, label), {"step": step, "signature": sig,
                                                         "pass_at_k": {"Math Avg": {"1": value}}})
    return run


def test_run_scores_reads_each_epoch_checkpoint_and_lists_what_is_missing(tmp_path):
    steps = Steps(save_freq=2, total=None, train_batch_size=4, group_size=4, epochs_only=None)
    run = make_run(tmp_path, "a", [2, 4, 5, 6], {2: 0.2, 4: 0.5})  # 5: a stop checkpoint, not an epoch one
    got = run_scores("a", run, steps, "L", "Math Avg")
    assert [s.step for s in got.scores] == [2, 4] and got.scores[1].compute == 4 * 4 * 4
    assert got.unscored == [6] and got.absent == []  # the epoch checkpoints are 2, 4 and 6
    assert "checkpoints [6] not evaluated" in got.problem()
    # a rewritten checkpoint (verl trained that step again) makes its result stale
    (run / "global_step_4" / "actor" / "model_world_size_1_rank_0.pt").write_bytes(os.urandom(20))
    assert run_scores("a", run, steps, "L", "Math Avg").unscored == [4, 6]


def test_choose_applies_the_protocol_to_run_directories(tmp_path):
    steps = Steps(save_freq=2, total=None, train_batch_size=4, group_size=4, epochs_only=None)
    base = run_scores("b", make_run(tmp_path, "b", [2, 4, 6], {2: 0.2, 4: 0.5, 6: 0.4}), steps, "L", "Math Avg")
    focal = run_scores("f", make_run(tmp_path, "f", [2, 4, 6], {2: 0.3, 4: 0.35, 6: 0.9}), steps, "L", "Math Avg")
    assert choose(base, 0.0, None).checkpoint.step == 4
    assert choose(focal, 1.0, base).checkpoint.step == 4  # 6 scores best but used more compute than 4
    unfinished = run_scores("u", make_run(tmp_path, "u", [2], {2: 0.9}, done=False, total=6), steps, "L", "Math Avg")
    assert choose(unfinished, 0.0, None).checkpoint is None
    sel = choose(focal, 1.0, unfinished)
    assert sel.checkpoint is None and "baseline u: training not finished (step 2 of 6)" in sel.constraint
    fresh = run_scores("n", tmp_path / "never", steps, "L", "Math Avg")
    assert fresh.problem().startswith("not started")


def test_a_result_of_other_benchmark_files_is_not_current(tmp_path):
    run = make_run(tmp_path, "a", [2], {2: 0.2})
    result = json.loads(ck.result_path(run, 2, "L").read_text())
    ck.write_json(ck.result_path(run, 2, "L"), {**result, "benchmark_sha256": {"x": "1"}})
    assert ck.current_result(run, 2, "L", {"x": "1"}) is not None
    assert ck.current_result(run, 2, "L", {"x": "2"}) is None
