"""Reward for the CPU-backend end-to-end tests (loaded by verl from this file path, not collected by pytest).

An untrained model almost never solves a maze, so every group would score 0 and DAPO filtering would evict
them all. This rule scores about half the responses of a random policy 1: a response of even length
(in characters) is "correct". Groups then mix successes and failures, so the F-GRPO focal weight
g = (1 - μ̂)^γ takes values strictly between 0 and 1 and γ visibly changes the advantages.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return 1.0 if len(solution_str) % 2 == 0 else 0.0
