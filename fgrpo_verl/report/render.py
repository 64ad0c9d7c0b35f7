"""The report's text files: ``report.md`` (the printed text) and ``missing.md`` (what keeps cells empty)."""

from __future__ import annotations

from pathlib import Path


def finish(parts: list[str], empty: list[str], runs, out_dir: Path) -> str:
    """The report's text, written to report.md: ``parts``, one line naming the tables left out (no number of ours
    yet; their files hold the paper's), then what is missing."""
    if empty:
        parts.append(f"no numbers of ours yet: {', '.join(empty)} not printed (the paper's numbers are in "
                     f"{out_dir}/<table>.md)\n")
    parts.append(missing_section(runs, out_dir))
    text = "\n".join(parts)
    (out_dir / "report.md").write_text(text, encoding="utf-8")
    return text


def missing_section(runs, out_dir: Path) -> str:
    """``missing.md`` (every run and what keeps its cells empty, a line each) and its printed form, in which the runs
    not started are one line."""
    every = [f"- {r.name} ({r.job.job_name}): {m}" for r in runs for m in r.missing]
    (out_dir / "missing.md").write_text(
        "### Missing\n\n" + ("\n".join(every) if every else "nothing: every run is finished and evaluated") + "\n",
        encoding="utf-8")
    idle = [r.name for r in runs if r.missing == ["not started"]]
    shown = [f"- {r.name} ({r.job.job_name}): {m}" for r in runs if r.name not in idle for m in r.missing]
    if idle:
        shown.insert(0, f"- not started: {len(idle)} run(s), " + (", ".join(idle) if len(idle) <= 6 else
                                                                    f"{', '.join(idle[:6])}, ... (missing.md)"))
    return "### Missing\n\n" + ("\n".join(shown) if shown else "nothing: every run is finished and evaluated") + "\n"
