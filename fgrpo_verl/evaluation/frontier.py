"""Metrics at equal progress: read a curve where another metric (e.g. Q_pos) first reaches a level.

Two runs that learn at different speeds (F-GRPO vs GRPO, or GRPO at a smaller learning rate) are not comparable at
the same step: the slower one has simply moved less. Comparing them where they have gained the same correct mass
Q_pos puts them on the same footing (the Q_pos–M_ret frontier). Used by the rare-mode demo
(``fgrpo_verl.tasks.raremode.report``) and by ``fgrpo-verl simulate`` (``fgrpo_verl.cli.simulate``).

The crossing. Steps t_0 < t_1 < … with the reach metric q_j (Q_pos) and any other metrics v_j (M_ret, ΔNLL, …).
With i the first index where q_i ≥ L:

    i = 0 (the curve starts at or above L):   t* = t_0,  v* = v_0        (reached at the first recorded point;
                                                                          nothing before it to interpolate with)
    i > 0:  w = (L − q_{i−1}) / (q_i − q_{i−1}) ∈ (0, 1],
            t* = t_{i−1} + w (t_i − t_{i−1}),   v* = v_{i−1} + w (v_i − v_{i−1})
    no such i (the curve never reaches L):   None

Only the first upward crossing counts: a curve that reaches L, falls back and rises again is read at its first
crossing. Levels are compared with ≥, so a curve that touches L exactly at t_i is read at t_i (w = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from fgrpo_verl.theory._checks import real_array


@dataclass(frozen=True)
class Crossing:
    level: float
    step: float  # t*, interpolated
    values: dict  # metric name -> v*, interpolated at t*


def at_level(steps: Sequence[float], reach: Sequence[float], values: Mapping[str, Sequence[float]],
             level: float) -> Crossing | None:
    """Each of ``values`` at the first step where ``reach`` gets to ``level`` (module docstring for the formula).

    The callers' curves (a run's recorded points in step order, a simulation's steps; levels from
    :func:`check_levels` or :func:`default_levels`) meet the formula's terms: ``steps`` finite and strictly
    increasing, every curve as long as ``steps``, ``level`` finite. A non-finite ``reach`` (a diverged run) has no
    crossing and is refused. NaN inside ``values`` is carried into the result (a metric that was not measured stays
    unmeasured). Returns None when ``reach`` never gets to ``level``.
    """
    t, q = np.asarray(steps, dtype=np.float64), np.asarray(reach, dtype=np.float64)
    if not np.isfinite(q).all():
        raise ValueError(f"reach holds a non-finite value at step {t[~np.isfinite(q)][0]:g}: the crossing is undefined")
    curves = {name: np.asarray(v, dtype=np.float64) for name, v in values.items()}
    hits = np.flatnonzero(q >= level)
    if hits.size == 0:
        return None
    i = int(hits[0])
    if i == 0:
        return Crossing(float(level), float(t[0]), {name: float(v[0]) for name, v in curves.items()})
    w = (level - q[i - 1]) / (q[i] - q[i - 1])

    def lerp(a):
        return float(a[i - 1] + w * (a[i] - a[i - 1]))

    return Crossing(float(level), lerp(t), {name: lerp(v) for name, v in curves.items()})


def floor3(x: float) -> float:
    """x rounded down to 3 decimals, never above x (so a level made from a curve's peak is reached by it)."""
    out = math.floor(x * 1000) / 1000
    return out - 0.001 if out > x else out


def default_levels(start: float, peaks: Sequence[float]) -> list[float]:
    """The levels every curve reaches: top = the lowest peak rounded down to 3 decimals, and the midpoint between
    the common starting value and top (also rounded down); none when some curve never rises above the start (every
    curve is at such a level from its first point: there is nothing to compare)."""
    if len(peaks) == 0:
        raise ValueError("peaks is empty: need the highest value of at least one curve")
    top = floor3(min(float(p) for p in peaks))
    if top <= start:
        return []
    mid = floor3((start + top) / 2)
    return [mid, top] if start < mid < top else [top]


def above_start(levels: Sequence[float], start: float) -> tuple[list[float], list[float]]:
    """(levels above ``start``, levels at or below it). A curve that starts at ``start`` is at every level of the
    second list from its first point (read there as step 0, the start's values for every run), so those levels
    compare nothing; reports name them and read only the first list."""
    return [x for x in levels if x > start], [x for x in levels if x <= start]


def check_levels(name: str, levels: Sequence[float]) -> list[float]:
    """Levels of a probability mass given by a user: each finite in (0, 1), no repeats; returned in increasing
    order (the order they are reported in)."""
    out = real_array(name, levels, low=0.0, high=1.0, low_open=True, high_open=True).tolist()
    if len(set(out)) != len(out):
        raise ValueError(f"{name}={out} repeats a level: list each level once")
    return sorted(out)
