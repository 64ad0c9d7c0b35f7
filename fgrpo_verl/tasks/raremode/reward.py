"""verl reward function of the rare-mode task (``reward.custom_reward_function.path=pkg://fgrpo_verl.tasks.raremode.reward``).

verl calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` per response, decoded with
``skip_special_tokens=True`` (the termination token is gone). ``ground_truth`` is the prompt's correct symbols
as one string (e.g. ``"dkqa"``). Score 1.0 iff the response is exactly one of those symbols, else 0.0: a
response that never terminates is ``max_response_length`` = 2 tokens (two symbols, or a symbol and a reserved
token), never a single symbol, so it scores 0 too.
"""

from __future__ import annotations

from fgrpo_verl.tasks.maze.tokenizer import EOS_TOKEN


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    if not isinstance(ground_truth, str) or not ground_truth:
        raise ValueError(f"rare-mode ground_truth must be the non-empty string of correct symbols, got {ground_truth!r}")
    if not isinstance(solution_str, str):
        return 0.0
    # a decoder that keeps special tokens leaves the literal termination token (and padding) at the end
    answer = solution_str.partition(EOS_TOKEN)[0]
    return 1.0 if len(answer) == 1 and answer in ground_truth else 0.0
