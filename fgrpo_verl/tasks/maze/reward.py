"""verl reward function for the maze task.

verl 0.9.1 contract (``verl/trainer/ppo/reward.py get_custom_reward_fn`` and the ``naive`` reward manager in
``verl/experimental/reward_loop``): with

    reward.custom_reward_function.path=pkg://fgrpo_verl.tasks.maze.reward
    reward.custom_reward_function.name=compute_score

verl calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` once per response, with
the response decoded with ``skip_special_tokens=True`` (the ``<|endoftext|>`` termination token is already removed)
and ``ground_truth = reward_model["ground_truth"]`` from the parquet row. Extra keyword arguments come from
``+reward.custom_reward_function.reward_kwargs.<key>=...`` (e.g. ``...reward_kwargs.rule=reach``).

Rules
-----
``exact`` (default, the paper's single-solution reward): 1.0 iff the response is exactly the target action
    sequence. Because only ``<|endoftext|>`` stops generation, a response that never terminates is
    ``max_response_length`` tokens long; keep ``max_response_length`` > the longest path (``data.py`` records
    the longest path) so such a response can never equal the target.
``reach`` (MaxRL's rule, as described in the paper digest §5.2; its exact code was not read): 1.0 iff every
    move stays on open squares (no wall, no leaving the grid) and the last move ends on the goal. In a perfect
    maze this also accepts detours into dead ends and back, so it is *not* single-solution. Needs the grid,
    taken from ``extra_info["maze"]`` (written by ``data.py``).

Malformed output (characters other than U/D/L/R, reserved tokens, a non-string) scores 0.0 under both rules.
"""

from __future__ import annotations

from fgrpo_verl.tasks.maze.generator import GOAL, MOVES, START, WALL
from fgrpo_verl.tasks.maze.data import EOS, parse_grid

RULES = ("exact", "reach")


def reaches_goal(rows, actions: str) -> bool:
    """True iff ``actions`` walks from S to G over non-wall squares and stops on G."""
    start = goal = None
    for r, row in enumerate(rows):
        if START in row:
            start = (r, row.index(START))
        if GOAL in row:
            goal = (r, row.index(GOAL))
    if start is None or goal is None:
        raise ValueError(f"maze has no start ({START!r}) or goal ({GOAL!r}): {rows!r}")
    pos = start
    for action in actions:
        if action not in MOVES:
            return False
        dr, dc = MOVES[action]
        pos = (pos[0] + dr, pos[1] + dc)
        if not (0 <= pos[0] < len(rows) and 0 <= pos[1] < len(rows[0])) or rows[pos[0]][pos[1]] == WALL:
            return False
    return pos == goal


def compute_score(data_source, solution_str, ground_truth, extra_info=None, rule: str = "exact", **kwargs) -> float:
    """1.0 for a correct response under ``rule`` (``exact`` or ``reach``), else 0.0; see the module docstring."""
    if rule not in RULES:
        raise ValueError(f"reward rule must be one of {RULES}, got {rule!r}")
    if not isinstance(solution_str, str):
        return 0.0
    # a reward manager that decodes with skip_special_tokens=False leaves literal "<|endoftext|>" (termination and
    # padding) at the end; anything after the first one is padding
    actions = solution_str.partition(EOS)[0]
    if rule == "exact":
        return 1.0 if actions == ground_truth else 0.0
    maze_text = (extra_info or {}).get("maze")
    if not maze_text:
        raise ValueError("reward rule 'reach' needs extra_info['maze'] (the grid text written by maze/data.py)")
    return 1.0 if reaches_goal(parse_grid(maze_text), actions) else 0.0
