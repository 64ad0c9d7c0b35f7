"""Multi-output agent sessions: ``fgrpo`` and ``ds_grpo`` get the "final output per session" rule verl gives ``grpo``.

An agent loop may return several outputs per session (one per turn); verl's v1 trainer names each row
``{uid}_{session_id}_{output_index}``. For the literal estimator name ``grpo`` (only), verl's
``compute_advantage_for_multi_trajectories`` computes the group statistics over the *final* output of each session
(the largest output index) and gives every output of the session that output's advantage; every other name sees
all outputs as independent rollouts, so a 3-turn session would count three times in N and X.

For ``fgrpo`` and ``ds_grpo``, :func:`register` makes the v1 trainer do the same: rows R_s = outputs of session s,
f(s) = argmax index in R_s; the estimator runs on {f(s)} only (so N and X count sessions, as in grpo) and each
row r ∈ R_s gets A_r = A_{f(s)} at r's response tokens (ds_grpo's sign bit included: correct as the final output).
Every other estimator name goes to verl's function untouched. With one output per session (every single-turn run)
the rows are passed through unchanged.
"""

from __future__ import annotations

import torch

from fgrpo_verl.integration import plugin
from fgrpo_verl.integration.ds_grpo import FGRPO_ESTIMATORS

FINAL_ROWS = "fgrpo final-output rows"


def final_output_rows(batch_keys) -> tuple[list[int], list[int]]:
    """``(final, session_of_row)``: the row of each session's last output, and for each row its session's
    position in ``final``. Keys are ``{uid}_{session_id}_{output_index}`` (the uid may contain ``_``)."""
    best: dict[str, tuple[int, int]] = {}  # session -> (output index, row)
    sessions = []
    for row, key in enumerate(batch_keys):
        parts = str(key).rsplit("_", 2)
        if len(parts) != 3 or not parts[2].lstrip("-").isdigit():
            raise ValueError(f"batch key {key!r} is not {{uid}}_{{session_id}}_{{output_index}}")
        session, output = f"{parts[0]}_{parts[1]}", int(parts[2])
        sessions.append(session)
        if session not in best or best[session][0] < output:
            best[session] = (output, row)
    position = {session: i for i, session in enumerate(best)}
    return [row for _, row in best.values()], [position[s] for s in sessions]


def advantage_of_final_outputs(compute_advantage, data, batch_keys, **kwargs):
    """verl's ``compute_advantage`` over each session's final output, spread to all outputs of the session."""
    final, session_of_row = final_output_rows(batch_keys)
    single = len(final) == len(session_of_row)  # one output per session: nothing to collapse
    plugin.report(FINAL_ROWS, None if single else final)
    if single:
        return compute_advantage(data, **kwargs)
    finals = compute_advantage(data.select_idxs(final), **kwargs)
    # The scalar advantage of each final output, read at its first response token.
    first_token = finals.batch["response_mask"].argmax(dim=1)
    scalar = finals.batch["advantages"][torch.arange(len(final)), first_token]
    spread = scalar[session_of_row].unsqueeze(-1) * data.batch["response_mask"]
    data.batch["advantages"] = spread
    data.batch["returns"] = spread
    return data


def capture_final_rows():
    """Collect, per advantage call inside the block, the final-output rows used (None: all rows)."""
    return plugin.collecting(FINAL_ROWS)


def register() -> None:
    """Route ``fgrpo`` and ``ds_grpo`` in ``trainer_base.compute_advantage_for_multi_trajectories`` (the name verl's v1
    ``_compute_advantage`` calls) through :func:`advantage_of_final_outputs`; idempotent."""
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.v1 import trainer_base

    original = trainer_base.compute_advantage_for_multi_trajectories
    if plugin.ident_of(original) == "v1:multi_output_sessions":
        return

    def compute_advantage_for_multi_trajectories(data, batch_keys, adv_estimator, **kwargs):
        if adv_estimator not in FGRPO_ESTIMATORS:
            return original(data, batch_keys=batch_keys, adv_estimator=adv_estimator, **kwargs)
        return advantage_of_final_outputs(compute_advantage, data, batch_keys, adv_estimator=adv_estimator, **kwargs)

    compute_advantage_for_multi_trajectories.__wrapped__ = original
    plugin.mark(compute_advantage_for_multi_trajectories, "v1:multi_output_sessions")
    trainer_base.compute_advantage_for_multi_trajectories = compute_advantage_for_multi_trajectories
