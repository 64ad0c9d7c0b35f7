""""Did you mean ...?" for a misspelt name (a config key, a group option, a recipe, a run), with ``difflib``."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable) -> str:
    """``"; did you mean 'a' or 'b'?"`` (the up to 3 closest candidates, ``difflib`` ratio >= 0.6), or ``""``."""
    close = difflib.get_close_matches(str(word), sorted({str(c) for c in candidates}), n=3, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
