"""fgrpo_verl.evaluation.frontier: a metric read where another first reaches a level (linear interpolation)."""

from __future__ import annotations

import math

import pytest

from fgrpo_verl.evaluation.frontier import at_level, check_levels, default_levels, floor3


def test_interpolates_between_the_two_steps_around_the_crossing():
    # q crosses 0.5 between step 2 (0.4) and step 4 (0.6): w = 0.5 -> step 3, m = (0.8 + 0.6) / 2
    c = at_level([0, 2, 4, 6], [0.2, 0.4, 0.6, 0.7], {"m": [1.0, 0.8, 0.6, 0.5], "d": [0, 0.1, 0.3, 0.4]}, 0.5)
    assert c.level == 0.5 and c.step == pytest.approx(3.0)
    assert c.values["m"] == pytest.approx(0.7) and c.values["d"] == pytest.approx(0.2)
    # an uneven weight: 0.45 is a quarter of the way from 0.4 to 0.6
    c = at_level([0, 2, 4, 6], [0.2, 0.4, 0.6, 0.7], {"m": [1.0, 0.8, 0.6, 0.5]}, 0.45)
    assert c.step == pytest.approx(2.5) and c.values["m"] == pytest.approx(0.75)


def test_exact_touch_first_crossing_start_and_never():
    q, m = [0.2, 0.5, 0.4, 0.9], [1.0, 0.7, 0.8, 0.1]
    # touching the level exactly reads that step (w = 1)
    assert at_level([1, 2, 3, 4], q, {"m": m}, 0.5).step == pytest.approx(2.0)
    # the first crossing counts, not the later one after the dip
    c = at_level([1, 2, 3, 4], q, {"m": m}, 0.45)
    assert c.step == pytest.approx(1 + 0.25 / 0.3) and c.values["m"] == pytest.approx(1.0 - 0.3 * 0.25 / 0.3)
    # a curve that starts at or above the level is read at its first point
    c = at_level([5, 6], [0.7, 0.8], {"m": [0.9, 0.1]}, 0.6)
    assert (c.step, c.values["m"]) == (5.0, 0.9)
    # never reached
    assert at_level([1, 2, 3, 4], q, {"m": m}, 0.95) is None
    # NaN in a value curve is carried, not dropped
    assert math.isnan(at_level([0, 1], [0.1, 0.9], {"m": [float("nan"), 0.5]}, 0.5).values["m"])


@pytest.mark.parametrize(
    "steps, reach, values, level, match",
    [
        ([0, 2, 1], [0.1, 0.2, 0.3], {}, 0.2, "steps must be finite and strictly increasing"),
        ([0, 1, 1], [0.1, 0.2, 0.3], {}, 0.2, "steps must be finite and strictly increasing"),
        ([0, 1, 2], [0.1, 0.2], {}, 0.2, "reach has 2 values but steps has 3"),
        ([0, 1, 2], [0.1, 0.2, 0.3], {"m_ret": [1, 2]}, 0.2, r"values\['m_ret'\] has 2 values"),
        ([0, 1, 2], [0.1, float("nan"), 0.3], {}, 0.2, "reach holds a non-finite value at step 1"),
        ([0, 1, 2], [0.1, 0.2, 0.3], {}, float("nan"), "level=nan is invalid"),
        ([0, 1, 2], [0.1, 0.2, 0.3], {}, True, "level=True is invalid"),
        ([], [], {}, 0.2, "steps must be a non-empty 1-D"),
        ([[0, 1]], [0.1, 0.2], {}, 0.2, "steps must be a non-empty 1-D"),
        (["a", 1], [0.1, 0.2], {}, 0.2, "steps must be a 1-D sequence of numbers"),
    ],
)
def test_bad_input_names_the_argument(steps, reach, values, level, match):
    with pytest.raises(ValueError, match=match):
        at_level(steps, reach, values, level)


def test_default_levels_are_reached_by_every_curve():
    assert floor3(0.6849) == 0.684 and floor3(0.684) == 0.684 and floor3(0.5) == 0.5
    assert default_levels(0.411, [0.6849, 0.75, 0.9]) == [0.547, 0.684]
    # nobody rose above the start: only the (start-point) top level
    assert default_levels(0.5, [0.45, 0.7]) == [0.45]
    with pytest.raises(ValueError, match="peaks is empty"):
        default_levels(0.5, [])


def test_check_levels_sorts_and_rejects():
    assert check_levels("--q-levels", [0.9, 0.6]) == [0.6, 0.9]
    for bad, match in (([0.5, 1.0], "holds 1.0"), ([0.0], "holds 0.0"), ([float("nan")], "holds nan"),
                       ([0.5, 0.5], "repeats a level"), ([], "is empty"), ([True], "holds True")):
        with pytest.raises(ValueError, match=match):
            check_levels("--q-levels", bad)
