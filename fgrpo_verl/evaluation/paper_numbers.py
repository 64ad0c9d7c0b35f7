"""The paper's numbers (F-GRPO, arXiv 2602.06717 v2) with their source table, for ``fgrpo-verl report`` to print
beside ours.

The tables are data, transcribed verbatim in ``paper_tables.md`` (shipped in the package; its comments say where
they come from and what each table's cells hold). tests/test_paper_numbers_on_cpu.py checks the transcription
against itself: every Math/OOD average recomputes from its benchmark cells within rounding, every Table 1 cell equals
the k = 1 / k = 256 rows of Tables 12-14, Table 6's selected-gamma rows equal Table 1, and Table 4's pass@k does not
fall as k grows (Table 4 shares no cell with another table, so that and its grid being recipes/maze.yaml's are all it
can be checked against).

Names are normalised to the ones ``fgrpo-verl eval`` uses: the benchmark "AMC" of Tables 1-3 is AMC23 (Tables
12-14), "Llama-3.2-3B-Instr." is Llama-3.2-3B-Instruct, Table 6's "Qwen2.5" / "Qwen3" / "Llama" are the full names.
"""

from __future__ import annotations

import functools
from importlib.resources import files

# the k of Table 4's columns
TABLE_4_KS = (1, 128, 256)
MODEL_NAMES = {"Llama-3.2-3B-Instr.": "Llama-3.2-3B-Instruct", "Qwen2.5": "Qwen2.5-7B", "Qwen3": "Qwen3-4B-Base",
               "Llama": "Llama-3.2-3B-Instruct"}
COLUMN_NAMES = {"AMC": "AMC23"}
# the model of Tables 2 and 3 (paper §5.3: the group-size sweep and the controls are Qwen2.5-7B only)
TABLE_2_3_MODEL = "Qwen2.5-7B"


@functools.lru_cache(maxsize=None)
def tables() -> dict[str, tuple[list[str], list[list[str]]]]:
    """``{heading: (header cells, rows of cells)}`` of paper_tables.md, a table per ``## `` heading."""
    text = files(__package__).joinpath("paper_tables.md").read_text(encoding="utf-8")
    out = {}
    for section in text.split("\n## ")[1:]:
        heading, _, body = section.partition("\n")
        split = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in body.splitlines()
                 if line.startswith("|") and not line.startswith("|---")]
        out[heading.strip()] = split[0], split[1:]
    return out


def _pair(cell: str) -> tuple[float, float]:
    first, second = cell.split("/")
    return float(first), float(second)


@functools.lru_cache(maxsize=None)
def cells() -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """``{(source table, model, method, column): (pass@1, pass@256)}`` for Tables 1, 2, 3 and 6.

    Methods: Table 1 ``GRPO``, ``F-GRPO``, ``DAPO``, ...; Table 2 ``GRPO N=2`` ... ``GRPO N=32``, ``F-GRPO N=8``;
    Table 3 its row labels (``GRPO low-LR (6.8e-7)``, ``GRPO-H (entropy 1e-3)``, ``GRPO-KL (1e-3)``, ``DS-GRPO (Gai
    et al. 2025)``, ``F-GRPO (γ=0.5)``); Table 6 ``<BASE> γ=<gamma>`` (``GRPO γ=0``, ``DAPO γ=0.5``, ...)."""
    out = {}
    header, rows = tables()["Table 1"]
    model = None
    for row in rows:
        model = MODEL_NAMES.get(row[0], row[0]) or model
        for column, cell in zip(header[2:], row[2:]):
            out[("Table 1", model, row[1], COLUMN_NAMES.get(column, column))] = _pair(cell)
    for table in ("Table 2", "Table 3"):
        header, rows = tables()[table]
        for row in rows:
            method = row[0].replace("**", "").replace(" (γ=0.5)", "") if table == "Table 2" else row[0]
            for column, cell in zip(header[1:], row[1:]):
                if "/" in cell:  # Table 2's ΔNLL_rare column is a single number
                    out[(table, TABLE_2_3_MODEL, method, COLUMN_NAMES.get(column, column))] = _pair(cell)
    header, rows = tables()["Table 6"]
    base = None
    for row in rows:
        base = row[0] or base
        gamma = float(row[1])
        for column, cell in zip(header[2:], row[2:]):
            short, kind = column.rsplit(" ", 1)
            out[("Table 6", MODEL_NAMES[short], f"{base} γ={gamma:g}", f"{kind} Avg")] = _pair(cell)
    return out


@functools.lru_cache(maxsize=None)
def delta_nll_rare() -> dict[str, float]:
    """Table 2's ΔNLL_rare column (App. M.2), per method."""
    header, rows = tables()["Table 2"]
    return {row[0].replace("**", "").replace(" (γ=0.5)", ""): float(row[-1]) for row in rows}


def _tables_12_14() -> dict[tuple[str, str, str, float], str]:
    """``{(source table, model, base algorithm, selected gamma): heading}``, a heading ``Table 12: MODEL, BASE, γ=G``
    (Tables 12-14)."""
    out = {}
    for heading in tables():
        table, _, rest = heading.partition(": ")
        if rest:
            model, base, gamma = rest.split(", ")
            out[(table, model, base, float(gamma.removeprefix("γ=")))] = heading
    return out


@functools.lru_cache(maxsize=None)
def curves() -> dict[tuple[str, str, str, str], dict[int, float]]:
    """``{(source table, model, method, benchmark): {k: pass@k in %}}`` from Tables 12-14; methods ``GRPO`` and
    ``F-GRPO`` (at the gamma of the table's header), ``DAPO`` / ``F-DAPO``, ``CISPO`` / ``F-CISPO``."""
    out: dict = {}
    for (table, model, base, _gamma), heading in _tables_12_14().items():
        header, rows = tables()[heading]
        for row in rows:
            k = int(row[0])
            for bench, cell in zip(header[1:], row[1:]):
                baseline, focal = _pair(cell)
                out.setdefault((table, model, base, bench), {})[k] = baseline
                out.setdefault((table, model, f"F-{base}", bench), {})[k] = focal
    return out


def selected_gammas() -> dict[tuple[str, str], float]:
    """``{(model, base algorithm): gamma}`` the paper selected (Table 7, the headers of Tables 12-14)."""
    return {(model, base): gamma for (_table, model, base, gamma) in _tables_12_14()}


@functools.lru_cache(maxsize=None)
def table_4() -> dict[tuple[int, int, float], float]:
    """``{(N, k, gamma): pass@k in %}`` of Table 4 (the maze); gamma 0 is GRPO."""
    header, rows = tables()["Table 4"]
    out = {}
    for row in rows:
        for column, cell in zip(header[1:], row[1:]):
            metric, method = column.split(" ", 1)
            gamma = 0.0 if method == "GRPO" else float(method.split("=")[1])
            out[(int(row[0]), int(metric.removeprefix("p@")), gamma)] = float(cell)
    return out
