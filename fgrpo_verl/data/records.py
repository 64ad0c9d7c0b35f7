"""Record files: the one reader of records (benchmarks, DeepScaleR) and the one place rows become a verl parquet
file (DeepScaleR, the maze and the rare-mode task all write here), and where the launcher and the preflight count
them."""

from __future__ import annotations

import json
from pathlib import Path

SUFFIXES = (".parquet", ".jsonl", ".json")


def read_records(path: str | Path, where: str | None = None) -> list[dict]:
    """The records of a ``.jsonl`` file (a JSON object a line), a ``.json`` file (a list of objects, or an object a
    line) or a ``.parquet`` file (a row each); a ValueError starting with ``where`` (default: the path) otherwise.

    Parquet goes through pyarrow, which keeps nulls as None and nested columns as lists and dicts (pandas would give
    NaN and numpy arrays), so a record is the same plain JSON value whichever format held it."""
    path = Path(path)
    where = where or str(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{where}: unsupported file type {suffix!r}; use .parquet, .jsonl or .json")
    if not path.is_file():
        raise ValueError(f"{where}: no such file")
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if suffix == ".json" and text.lstrip().startswith("["):
        records = json.loads(text)
    else:
        records = []
        # only "\n" ends a record: str.splitlines() would also split at U+2028/U+2029/U+0085, which JSON allows raw
        # inside strings (json.dumps(ensure_ascii=False) writes them so), cutting such a record in two
        for lineno, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}:{lineno}: not valid JSON ({err.msg})") from err
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: record {i} must be a JSON object, got {type(rec).__name__}")
    return records


def write_rows(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` (one dict per verl data row) to ``path``, creating its folder; return the path."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def parquet_rows(files, workdir: Path) -> int | None:
    """Rows of the parquet ``files`` (one path or a list; relative paths resolve against ``workdir``); None when
    a file is missing (on a login node the data may only exist where the job runs)."""
    import pyarrow.parquet as pq

    names = [files] if isinstance(files, str) else [str(f) for f in files or []]
    if not names:
        return None
    total = 0
    for name in names:
        path = Path(workdir) / name
        if not path.is_file():
            return None
        total += pq.ParquetFile(path).metadata.num_rows
    return total
