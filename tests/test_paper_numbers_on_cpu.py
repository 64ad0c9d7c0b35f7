"""The paper's numbers as transcribed (fgrpo_verl/evaluation/paper_numbers.py), checked against themselves: a typo
in one cell breaks an average, a Table 1 / Tables 12-14 agreement, a Table 6 / Table 1 agreement, or Table 4's pass@k
growing with k."""

import pytest

from fgrpo_verl.evaluation import paper_numbers as pn

MODELS = ("Qwen2.5-7B", "Qwen3-4B-Base", "Llama-3.2-3B-Instruct")
METHODS = ("GRPO", "F-GRPO", "DAPO", "F-DAPO", "CISPO", "F-CISPO")
# the paper's average columns (§5.3) and the benchmarks each averages
MATH_BENCHMARKS = ("AIME24", "AIME25", "AMC23", "MATH500", "Minerva", "Olympiad")
OOD_BENCHMARKS = ("IFEval", "SynLogic", "GPQA")
AVERAGES = {"Math Avg": MATH_BENCHMARKS, "OOD Avg": OOD_BENCHMARKS}


def test_every_table_has_its_rows_and_columns():
    cells = pn.cells()
    columns = ("Math Avg", *MATH_BENCHMARKS, "OOD Avg", *OOD_BENCHMARKS)
    assert all(("Table 1", m, meth, c) in cells for m in MODELS for meth in METHODS for c in columns)
    assert {k[2] for k in cells if k[0] == "Table 2"} == {"GRPO N=2", "GRPO N=4", "GRPO N=8", "GRPO N=16", "GRPO N=32",
                                                          "F-GRPO N=8"}
    assert len([k for k in cells if k[0] == "Table 3"]) == 5 * 11
    assert len([k for k in cells if k[0] == "Table 6"]) == 3 * 4 * 3 * 2
    assert len(pn.curves()) == 3 * 6 * 9 and all(sorted(v) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
                                                  for v in pn.curves().values())


@pytest.mark.parametrize("table", ["Table 1", "Table 2", "Table 3"])
def test_the_averages_recompute_from_their_benchmarks(table):
    # the paper averages unrounded values and prints one decimal: the mean of the printed cells is within 0.1 (seen:
    # 0.07); a wrong digit moves a math average by >= 1/6 point in any but the last place
    cells = pn.cells()
    rows = {(k[1], k[2]) for k in cells if k[0] == table}
    for model, method in rows:
        for avg, members in AVERAGES.items():
            for i in (0, 1):
                mean = sum(cells[(table, model, method, b)][i] for b in members) / len(members)
                assert abs(mean - cells[(table, model, method, avg)][i]) <= 0.1, (table, model, method, avg, i)


def test_table_1_equals_the_k1_and_k256_rows_of_tables_12_to_14():
    cells, curves = pn.cells(), pn.curves()
    checked = 0
    for (_table, model, method, bench), values in curves.items():
        assert cells[("Table 1", model, method, bench)] == (values[1], values[256])
        checked += 1
    assert checked == 162


def test_table_6_rows_agree_with_table_1_at_gamma_0_and_the_selected_gamma():
    cells = pn.cells()
    selected = pn.selected_gammas()
    assert selected[("Qwen2.5-7B", "CISPO")] == 1.0 and selected[("Llama-3.2-3B-Instruct", "DAPO")] == 1.0
    assert sum(g == 0.5 for g in selected.values()) == 7
    for (model, base), gamma in selected.items():
        for avg in AVERAGES:
            assert cells[("Table 6", model, f"{base} γ=0", avg)] == cells[("Table 1", model, base, avg)]
            assert cells[("Table 6", model, f"{base} γ={gamma:g}", avg)] == cells[("Table 1", model, f"F-{base}", avg)]


def test_tables_2_and_3_share_their_rows_with_table_1():
    cells = pn.cells()
    for column in ("Math Avg", "AMC23", "OOD Avg", "GPQA"):
        assert cells[("Table 2", "Qwen2.5-7B", "GRPO N=8", column)] == cells[("Table 1", "Qwen2.5-7B", "GRPO", column)]
        assert cells[("Table 2", "Qwen2.5-7B", "F-GRPO N=8", column)] == cells[("Table 1", "Qwen2.5-7B", "F-GRPO", column)]
        assert cells[("Table 3", "Qwen2.5-7B", "F-GRPO (γ=0.5)", column)] == \
            cells[("Table 1", "Qwen2.5-7B", "F-GRPO", column)]
    assert pn.delta_nll_rare()["F-GRPO N=8"] == 0.46


def _maze_grid() -> set[tuple[int, float]]:
    """(N, gamma) of every run of recipes/maze.yaml, read from its overrides."""
    from fgrpo_verl.launch.recipe import load_recipe

    recipe = load_recipe("maze")
    grid = set()
    for run in recipe.runs:
        values = dict(o.split("=", 1) for o in recipe.run_overrides(run) if "=" in o)
        grid.add((int(values["actor_rollout_ref.rollout.n"]), float(values["algorithm.fgrpo.gamma"])))
    return grid


def test_table_4_covers_the_maze_recipes_grid_at_its_three_k():
    # Table 4 shares no cell with another table: its grid is what `report maze` looks its cells up by, so a row or
    # column lost in the transcription (or a run added to the recipe) shows here
    table = pn.table_4()
    assert len(table) == 6 * 3 * 3
    assert {(n, g) for n, _k, g in table} == _maze_grid() == {(n, g) for n in (4, 8, 16, 32, 64, 128)
                                                            for g in (0.0, 0.5, 1.0)}
    assert {k for _n, k, _g in table} == set(pn.TABLE_4_KS) == {1, 128, 256}


def test_table_4_pass_at_k_is_a_percentage_that_does_not_fall_as_k_grows():
    # pass@k of one model on one set can only grow with k; a swapped digit between columns usually breaks that
    table = pn.table_4()
    assert all(0.0 <= v <= 100.0 for v in table.values())
    for n, g in _maze_grid():
        values = [table[(n, k, g)] for k in pn.TABLE_4_KS]
        assert values == sorted(values), (n, g, values)


def test_table_4_agrees_with_the_papers_own_summary_of_it():
    # the paper's summary of Table 4 (digest §6.5): with gamma = 0.5 pass@1 is 74.4-93.6 against GRPO's 65.6-75.8,
    # pass@256 75.9-96.5 against 67.3-76.9
    table = pn.table_4()

    def span(k, g):
        values = [v for (_n, kk, gg), v in table.items() if kk == k and gg == g]
        return min(values), max(values)

    assert span(1, 0.5) == (74.4, 93.6) and span(1, 0.0) == (65.6, 75.8)
    assert span(256, 0.5) == (75.9, 96.5) and span(256, 0.0) == (67.3, 76.9)
