"""verl's console step line (``step:N - key:value - ...``, its ``console`` logger) read back: by ``train``'s quiet
terminal (``fgrpo_verl/cli/quiet.py``), the maze demo's echo and the report's Table 4."""

from __future__ import annotations

import re

# verl's console logger (and the demo's echo): the keys a step line is reduced to, with short labels
STEP_KEYS = (
    ("critic/score/mean", "score"),
    ("response_length/mean", "resp_len"),
    ("actor/pg_loss", "pg_loss"),
    ("fgrpo/g_mean", "g_mean"),
    ("timing_s/step", "step_s"),
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAY_PREFIX = re.compile(r"^\((?:[A-Za-z0-9_]+ )?pid=\d+(?:, ip=[^)]*)?\)\s*")


def clean(line: str) -> str:
    """A log line without colour codes and Ray's ``(Actor pid=N)`` prefix."""
    return _RAY_PREFIX.sub("", _ANSI.sub("", line)).rstrip("\n")


def step_fields(line: str) -> dict[str, str] | None:
    """``{key: value}`` of verl's console step line (``step:N - key:value - ...``), None for any other line."""
    text = clean(line)
    at = text.find("step:")
    if at < 0 or " - " not in text[at:]:
        return None
    fields = dict(part.split(":", 1) for part in text[at:].strip().split(" - ") if ":" in part)
    return fields if "step" in fields else None


def _short(value: str) -> str:
    try:
        return f"{float(value):.4g}"
    except ValueError:
        return value[:10]


def step_summary(line: str, total: int | None = None) -> str | None:
    """``step 3/16  score 0.4375  resp_len 2  pg_loss -0.0123  step_s 3.51`` from verl's step line."""
    fields = step_fields(line)
    if fields is None:
        return None
    step = fields["step"].strip() + (f"/{total}" if total else "")
    return "  ".join([f"step {step}"] + [f"{label} {_short(fields[key])}" for key, label in STEP_KEYS if key in fields])
