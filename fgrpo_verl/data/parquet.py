"""The one place rows become a verl parquet file (DeepScaleR, the maze and the rare-mode task all write here)."""

from __future__ import annotations

from pathlib import Path


def write_rows(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` (one dict per verl data row) to ``path``, creating its folder; return the path."""
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path
