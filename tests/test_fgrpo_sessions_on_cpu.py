"""Multi-output agent sessions: `fgrpo` follows verl's `grpo` rule (final output per session) in the v1 trainer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import algo_config

import verl  # noqa: F401  (loads the plugin)
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories as verl_multi

from fgrpo_verl.integration import sessions
from fgrpo_verl.integration.estimator import capture_results
from fgrpo_verl.integration.plugin import register_all


def _sessions_batch(seed=0, prompts=3, n=4, max_outputs=3, length=6):
    """Rows of agent sessions in shuffled order: keys {uid}_{session}_{output}; earlier outputs carry noise rewards
    (only the final output's reward is the session's outcome)."""
    rng = np.random.default_rng(seed)
    keys, uids = [], []
    for p in range(prompts):
        uid = f"prompt-{p}_x"  # an underscore inside the uid, as verl's keys allow
        for s in range(n):
            for o in range(int(rng.integers(1, max_outputs + 1))):
                keys.append(f"{uid}_{s}_{o}")
                uids.append(uid)
    order = rng.permutation(len(keys))
    keys, uids = [keys[i] for i in order], [uids[i] for i in order]
    b = len(keys)
    lengths = rng.integers(1, length + 1, size=b)
    mask = torch.from_numpy((np.arange(length)[None, :] < lengths[:, None]).astype(np.float32))
    rewards = torch.zeros(b, length)
    rewards[torch.arange(b), torch.from_numpy(lengths - 1)] = torch.from_numpy(rng.integers(0, 2, size=b)).float()
    rewards[0, 0] += 0.25  # a non-0/1 score somewhere

    def make():
        return DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()},
                                   non_tensors={"uid": np.asarray(uids, dtype=object)})

    return make, keys


@pytest.fixture(autouse=True)
def _registered():
    register_all()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("norm", [True, False])
def test_gamma_zero_is_bitwise_grpo_with_the_final_output_rule(monkeypatch, seed, norm):
    make, keys = _sessions_batch(seed)
    ours = trainer_base.compute_advantage_for_multi_trajectories(
        make(), batch_keys=keys, adv_estimator="fgrpo", norm_adv_by_std_in_grpo=norm,
        config=algo_config(gamma=0.0, threshold=0.5, norm=norm),
    ).batch["advantages"]
    # verl's own multi-output code for the literal "grpo", with its loop estimator ...
    loop = verl_multi(make(), batch_keys=keys, adv_estimator="grpo", norm_adv_by_std_in_grpo=norm).batch["advantages"]
    torch.testing.assert_close(ours, loop, rtol=0, atol=1e-6)
    # ... and with its vectorised arithmetic (the one fgrpo's γ = 0 reproduces bit for bit): identical bits.
    monkeypatch.setattr(core_algos, "compute_grpo_outcome_advantage", core_algos.compute_grpo_vectorized_outcome_advantage)
    vec = verl_multi(make(), batch_keys=keys, adv_estimator="grpo", norm_adv_by_std_in_grpo=norm).batch["advantages"]
    assert torch.equal(ours, vec)
    # Without the rule every output would be its own rollout: a different answer (so the test can fail).
    flat = compute_advantage(make(), adv_estimator="fgrpo", norm_adv_by_std_in_grpo=norm,
                             config=algo_config(gamma=0.0, threshold=0.5, norm=norm)).batch["advantages"]
    assert not torch.equal(flat, vec)


def test_groups_count_sessions_and_every_output_gets_its_sessions_advantage():
    make, keys = _sessions_batch(5, prompts=2, n=4)
    final, session_of_row = sessions.final_output_rows(keys)
    assert len(final) == 8
    with capture_results() as captured, sessions.capture_final_rows() as rows:
        out = trainer_base.compute_advantage_for_multi_trajectories(
            make(), batch_keys=keys, adv_estimator="fgrpo", config=algo_config(gamma=1.0, threshold=0.5)
        )
    assert rows == [final]
    result = captured[0][1]
    assert result.group_size.tolist() == [4.0, 4.0]  # N counts sessions, not outputs
    adv, mask = out.batch["advantages"], out.batch["response_mask"]
    scalars = result.advantages[torch.arange(len(final)), result.advantages.abs().argmax(dim=1)]
    for row, s in enumerate(session_of_row):
        assert torch.equal(adv[row], scalars[s] * mask[row])


def test_single_output_sessions_pass_through_and_other_estimators_are_untouched():
    make, keys = _sessions_batch(3, max_outputs=1)
    with sessions.capture_final_rows() as rows:
        ours = trainer_base.compute_advantage_for_multi_trajectories(
            make(), batch_keys=keys, adv_estimator="fgrpo", config=algo_config(gamma=0.5))
    assert rows == [None]
    plain = compute_advantage(make(), adv_estimator="fgrpo", config=algo_config(gamma=0.5))
    assert torch.equal(ours.batch["advantages"], plain.batch["advantages"])
    make, keys = _sessions_batch(4)
    wrapped = trainer_base.compute_advantage_for_multi_trajectories
    assert wrapped.__wrapped__ is verl_multi
    a = wrapped(make(), batch_keys=keys, adv_estimator="rloo_vectorized", config=algo_config())
    b = verl_multi(make(), batch_keys=keys, adv_estimator="rloo_vectorized", config=algo_config())
    assert torch.equal(a.batch["advantages"], b.batch["advantages"])


def test_malformed_batch_keys_are_refused():
    with pytest.raises(ValueError, match=r"batch key 'abc' is not \{uid\}_\{session_id\}_\{output_index\}"):
        sessions.final_output_rows(["abc"])


def test_ds_grpo_counts_sessions_too_and_every_output_carries_its_sessions_correctness():
    make, keys = _sessions_batch(6, prompts=2, n=4)
    final, session_of_row = sessions.final_output_rows(keys)

    def binary():
        data = make()
        data.batch["token_level_rewards"] = data.batch["token_level_rewards"].floor()  # DS-GRPO needs 1/0 scores
        return data

    config = algo_config(gamma=0.0, threshold=0.5)
    with sessions.capture_final_rows() as rows:
        ds = trainer_base.compute_advantage_for_multi_trajectories(binary(), batch_keys=keys, adv_estimator="ds_grpo",
                                                                   config=config).batch["advantages"]
    assert rows == [final]  # the final-output rule ran (verl's function for any other name reports nothing)
    fg = trainer_base.compute_advantage_for_multi_trajectories(binary(), batch_keys=keys, adv_estimator="fgrpo",
                                                               config=config).batch["advantages"]
    assert torch.equal(ds, fg)  # the values are F-GRPO's (GRPO's at gamma 0) over sessions, as for fgrpo
    # the sign bit of each output is its session's final outcome
    mask = binary().batch["response_mask"].bool()
    correct = binary().batch["token_level_rewards"].sum(-1)[final][session_of_row] > 0.5
    assert torch.equal(torch.signbit(ds) & mask, ~correct[:, None] & mask)
    assert correct.any() and not correct.all()
