"""Reward functions in verl's ``custom_reward_function`` contract, selected from Hydra configs.

verl calls ``fn(data_source=, solution_str=, ground_truth=, extra_info=)`` once per response. The F-GRPO paper
scores math with math-verify (1.0 correct / 0.0 incorrect, §5.3); verl ships that check
(``verl.utils.reward_score.math_verify.compute_score(model_output, ground_truth)``) but routes no data source
to it, so ``dataset=deepscaler`` selects this adapter:

    reward.custom_reward_function.path=pkg://fgrpo_verl.rewards
    reward.custom_reward_function.name=math_verify_score
"""

from __future__ import annotations


def math_verify_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """1.0 if math-verify finds ``ground_truth`` (a bare answer, boxed here) in ``solution_str``, else 0.0."""
    from verl.utils.reward_score.math_verify import compute_score

    return float(compute_score(solution_str, ground_truth))
