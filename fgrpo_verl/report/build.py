"""``fgrpo-verl report RECIPE``'s entry: plan the recipe's runs as ``launch`` does, then the evaluation tables
(tables.py) or, for a recipe whose runs validate while training, Table 4 and Figs. 6-7 (maze.py)."""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.evaluation.report import write_csv
from fgrpo_verl.report.runs import add_table, collect_runs, finish
from fgrpo_verl.report.tables import columns_of, curves, report_k, selection_table, table1, table6, table_runs


def build_report(recipe_arg: str, workdir: Path, out_dir: Path, significance: tuple | None,
                 log_dir: Path | None = None) -> str:
    """Write the report's files into ``out_dir``; returns its markdown. ``significance``: (iterations, method,
    seed), or None to skip the test. ``log_dir``: the runs' Slurm logs (launch's ``--log-dir``; default
    ``slurm_logs``), read for recipes without an evaluation block (maze.py). The text starts with the state of the
    sweep; a table without a number of ours is written to its file but not printed."""
    from fgrpo_verl.launch import plan_jobs
    from fgrpo_verl.report.maze import validation_report

    log_dir = Path(workdir) / "slurm_logs" if log_dir is None else Path(log_dir)
    # only files are read: verl's checks of the configs (a launch's) name no run differently, and cost verl's import
    recipe, jobs = plan_jobs(recipe_arg, None, [], log_dir, Path(workdir), check=False)
    if recipe.evaluation is None:
        return validation_report(recipe, jobs, log_dir, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    reports = collect_runs(jobs)
    plan = reports[0].plan
    columns = columns_of(plan)
    k = report_k(reports)
    tables = list(jobs[0].evaluation.spec.tables) or ["table1"]
    started = [r for r in reports if r.state != "not started"]
    parts = [f"# {recipe.name}: {recipe.reproduces}", "",
             f"{len(started)} of {len(reports)} runs started, {sum(r.state == 'done' for r in reports)} finished, "
             f"{sum(r.final is not None for r in reports)} evaluated (final pass at the selected checkpoint)", "",
             f"evaluation: protocol {plan.protocol}, selection n={plan.passes.selection.n}, final n="
             f"{plan.passes.final.n}", ""]
    write_csv(out_dir / "selection.csv", selection_table(reports)[1])
    if started:  # the runs not started are one line under Missing
        parts.append(selection_table(started)[0])
    pairs, empty = [], []
    for key in tables:
        if key == "curves":
            continue
        if key == "table1":
            table, pairs, sig_rows = table1(reports, columns, k, significance)
            if sig_rows:
                write_csv(out_dir / "significance.csv", sig_rows)
        else:
            table = table6(reports, plan, k) if key == "table6" else table_runs(reports, columns, k, key)
        write_csv(out_dir / f"{key}.csv", table.csv_rows(k))
        add_table(parts, empty, out_dir / f"{key}.md", table.markdown(k), table.has_ours())
    if "curves" in tables:
        add_table(parts, empty, out_dir / "tables12_14.md", curves(pairs, plan, out_dir),
                  any(base.final is not None and focal.final is not None for base, focal in pairs))
    return finish(parts, empty, reports, out_dir)
