"""pass_at_k against the exact combinatorial formula (math.comb + Fraction, then float64)."""

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from fgrpo_verl.pass_at_k import ks_up_to, mean_pass_at_k, pass_at_k


def exact(n: int, c: int, k: int) -> float:
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


def test_random_triples_match_exact_formula():
    rng = np.random.default_rng(0)
    n = rng.integers(1, 1100, size=400)
    c = np.array([rng.integers(0, m + 1) for m in n])
    k = np.array([rng.integers(1, m + 1) for m in n])
    got = pass_at_k(n, c, k)
    want = np.array([exact(int(a), int(b), int(d)) for a, b, d in zip(n, c, k)])
    assert got.shape == (400,)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "n,c,k",
    [
        (1, 0, 1), (1, 1, 1),            # single sample
        (10, 0, 1), (10, 0, 10),          # c = 0 -> exactly 0
        (10, 10, 1), (10, 10, 10),        # c = n -> exactly 1
        (7, 3, 7),                        # k = n, c > 0 -> 1
        (1024, 1000, 256),                # n - c < k -> exactly 1
        (1024, 768, 256),                 # n - c == k: boundary, C(k,k)/C(n,k) tiny but nonzero
        (1024, 1, 1), (1024, 1, 256), (1024, 1, 1024),
        (1024, 3, 256), (1024, 500, 256), (1024, 767, 256),
        (2048, 5, 512),                   # C(2048, 512) overflows float64
    ],
)
def test_edge_cases_match_exact(n, c, k):
    got = pass_at_k(n, c, k)
    assert isinstance(got, np.float64)
    want = exact(n, c, k)
    assert got == pytest.approx(want, rel=1e-12, abs=0)
    if c == 0:
        assert got == 0.0
    if n - c < k:
        assert got == 1.0


def test_broadcast_over_problems_and_ks():
    c = np.array([0, 1, 5, 64, 1024])
    ks = np.array(ks_up_to(1024))
    grid = pass_at_k(1024, c[:, None], ks[None, :])
    assert grid.shape == (5, 9)
    for i, ci in enumerate(c):
        for j, kj in enumerate(ks):
            assert grid[i, j] == pytest.approx(exact(1024, int(ci), int(kj)), rel=1e-12, abs=0)
    # pass@k is non-decreasing in k and in c
    assert np.all(np.diff(grid, axis=1) >= 0) and np.all(np.diff(grid, axis=0) >= 0)
    assert np.all(np.isfinite(grid))


def test_pass_at_1_is_accuracy_and_mean_over_problems():
    n = np.array([8, 8, 8])
    c = np.array([2, 0, 8])
    np.testing.assert_allclose(pass_at_k(n, c, 1), c / n, rtol=1e-15)
    assert mean_pass_at_k(n, c, 1) == pytest.approx((0.25 + 0 + 1) / 3, rel=1e-15)
    # hand value: n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert mean_pass_at_k(4, 1, 2) == 0.5


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n=4, c=1, k=5), r"k must be <= n.*k=5 > n=4"),
        (dict(n=4, c=5, k=1), r"c must be <= n.*c=5 > n=4"),
        (dict(n=4, c=-1, k=1), r"c must be >= 0, got -1"),
        (dict(n=4, c=1, k=-2), r"k must be >= 1, got -2"),
        (dict(n=4, c=1, k=0), r"k must be >= 1, got 0"),
        (dict(n=0, c=0, k=1), r"n must be >= 1, got 0"),
        (dict(n=4.5, c=1, k=1), r"n must be an integer"),
        (dict(n=4, c=1.0, k=1), r"c must be an integer"),
        (dict(n=4, c=1, k=np.array([1.5])), r"k must be an integer"),
        (dict(n=4, c=True, k=1), r"c must be an integer"),
        (dict(n=4, c="1", k=1), r"c must be an integer"),
        (dict(n=np.array([4, 4]), c=np.array([1, 2, 3]), k=1), r"must broadcast"),
    ],
)
def test_bad_input_names_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(**kwargs)


def test_ks_up_to_caps_at_n_and_kmax():
    assert ks_up_to(1024) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert ks_up_to(100) == [1, 2, 4, 8, 16, 32, 64]
    assert ks_up_to(2048, k_max=1024)[-1] == 1024
    with pytest.raises(ValueError, match="n_max"):
        ks_up_to(0)


def test_large_batch_is_chunked_and_consistent():
    rng = np.random.default_rng(1)
    c = rng.integers(0, 1025, size=20000)  # 20000 x ~1024 cells exceeds one chunk
    got = pass_at_k(1024, c, 256)
    uniq = np.unique(c)
    ref = {int(u): exact(1024, int(u), 256) for u in uniq}
    np.testing.assert_allclose(got, [ref[int(x)] for x in c], rtol=1e-12, atol=0)


# ---- table-based implementation: exact against Fraction arithmetic, property-tested -------------------
from hypothesis import given, settings, strategies as st  # noqa: E402

from fgrpo_verl.pass_at_k import pass_at_k_curve, pass_at_k_table  # noqa: E402


def _exact_fraction(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def _close(got: float, want: Fraction) -> bool:
    """Relative 1e-12 against the exact rational; exact zeros and ones must come out exactly."""
    if want == 0 or want == 1:
        return got == float(want)
    return abs(Fraction(got) - want) <= Fraction(1, 10**12) * want


@st.composite
def triples(draw, n_max=2048):
    n = draw(st.integers(1, n_max))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@settings(max_examples=300, deadline=None)
@given(triples())
def test_property_pass_at_k_is_exact_to_1e12(t):
    n, c, k = t
    assert _close(float(pass_at_k(n, c, k)), _exact_fraction(n, c, k))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.lists(st.integers(1, 300), min_size=1, max_size=6))
def test_property_table_rows_are_exact(n, ks):
    ks = [min(k, n) for k in ks]
    table = pass_at_k_table(n, ks)
    assert table.shape == (len(ks), n + 1)
    for row, k in zip(table, ks):
        for c in range(n + 1):
            assert _close(float(row[c]), _exact_fraction(n, c, k)), (n, c, k)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([4, 16, 37, 1024]), st.floats(0, 1)), min_size=1, max_size=30))
def test_property_curve_is_the_exact_mean_over_mixed_n(problems):
    n = np.array([p[0] for p in problems])
    c = np.array([int(round(p[1] * p[0])) for p in problems])
    ks = [1, 2, 3, 4, 16, 37, 1024]
    curve = pass_at_k_curve(n, c, ks)
    for k, got in zip(ks, curve):
        if k > n.min():
            assert np.isnan(got)  # undefined for some problem: shown as "-"
        else:
            want = sum(_exact_fraction(int(a), int(b), k) for a, b in zip(n, c)) / len(n)
            assert _close(float(got), want), k


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 400), st.lists(st.floats(0, 1), min_size=1, max_size=25), st.data())
def test_property_the_k_recurrence_is_exact_for_every_budget(n, fractions, data):
    """The path pass_at_k_curve takes for many budgets (every k = 1..n): each k's histogram-weighted sum of
    pass@k against exact rationals, including the exact zeros (c = 0) and ones (n - c < k)."""

    module = __import__("fgrpo_verl.pass_at_k", fromlist=["_recurrence_means"])
    c = np.array([int(round(f * n)) for f in fractions] + data.draw(st.lists(st.sampled_from([0, n]), max_size=3)))
    hist = np.bincount(c).astype(np.float64)
    ks = np.arange(1, n + 1)
    got = module._recurrence_means(n, hist, ks)
    table = module._table(n, ks, hist.size - 1) @ hist
    for k in ks.tolist():
        want = sum(_exact_fraction(n, int(x), k) for x in c)
        assert _close(float(got[k - 1]), want), (n, k)
        assert _close(float(table[k - 1]), want), (n, k)
    # only some budgets: the same values at those k
    some = np.unique(np.array(data.draw(st.lists(st.integers(1, n), min_size=1, max_size=5))))
    assert np.array_equal(module._recurrence_means(n, hist, some), got[some - 1])


def test_curve_and_table_validate_input():
    with pytest.raises(ValueError, match="k must be <= n"):
        pass_at_k_table(4, [5])
    with pytest.raises(ValueError, match="k must be >= 1"):
        pass_at_k_curve([4], [1], [0])
    with pytest.raises(ValueError, match="c must be <= n"):
        pass_at_k_curve([4], [5], [1])
    with pytest.raises(ValueError, match="equal-length"):
        pass_at_k_curve([4, 4], [1], [1])


def test_huge_n_with_few_correct_builds_only_the_needed_columns():
    """n = 10^9 would be a 10^9-column table; only c <= max c is built (exact product for c = 3)."""
    n, c, k = 10**9, 3, 10**6
    ratio = Fraction(1)
    for i in range(n - c + 1, n + 1):
        ratio *= 1 - Fraction(k, i)
    want = 1 - ratio
    assert _close(float(pass_at_k(n, c, k)), want)
    assert _close(float(pass_at_k_curve([n], [c], [k])[0]), want)


def test_curve_with_no_budget_within_the_smallest_n_is_all_nan():
    """Every requested k above some problem's n (or none requested): NaN per budget (empty for none), not a crash
    in the choice between the table and the k recurrence (it read the largest of zero budgets)."""
    got = pass_at_k_curve([4, 8], [1, 2], [5, 6])
    assert got.shape == (2,) and np.isnan(got).all()
    assert pass_at_k_curve([4], [1], np.array([], dtype=np.int64)).shape == (0,)


def test_curve_over_every_budget_takes_the_k_recurrence_and_is_exact(monkeypatch):
    """pass_at_k_curve with every k = 1..n (the curve the docs plot) goes through the k recurrence, and each
    budget's mean over problems, mapped back to the caller's order of ks, is the exact rational."""
    module = __import__("fgrpo_verl.pass_at_k", fromlist=["_recurrence_means"])
    used = []
    real = module._recurrence_means
    monkeypatch.setattr(module, "_recurrence_means", lambda *a: used.append(a[0]) or real(*a))
    n, c = 1000, np.array([0, 1, 7, 500, 999, 1000, 500])
    ks = np.arange(n, 0, -1)  # descending, as a caller may pass them
    curve = pass_at_k_curve(np.full(c.size, n), c, ks)
    assert used == [n]
    for k, got in zip(ks.tolist(), curve):
        want = sum(_exact_fraction(n, int(x), k) for x in c) / c.size
        assert _close(float(got), want), k
