"""The one place rows become a verl parquet file (DeepScaleR, the maze and the rare-mode task all write here), and
where the launcher and the preflight count them."""

from __future__ import annotations

from pathlib import Path


def write_rows(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` (one dict per verl data row) to ``path``, creating its folder; return the path."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


def _files(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def parquet_rows(files, workdir: Path) -> int | None:
    """Rows of the parquet ``files`` (one path or a list; relative paths resolve against ``workdir``); None when
    a file is missing (on a login node the data may only exist where the job runs)."""
    import pyarrow.parquet as pq

    names = _files(files)
    if not names:
        return None
    total = 0
    for name in names:
        path = Path(workdir) / name
        if not path.is_file():
            return None
        total += pq.ParquetFile(path).metadata.num_rows
    return total
