"""An evaluation pass's results in the training run's W&B run.

The rows go to the run's id (``WANDB_RUN_ID``, resume allow) at steps after the training's last step, in ascending
checkpoint order and only as a gap-free prefix (W&B keeps a history in order; a later, lower step would be
dropped): per checkpoint one row with ``eval/checkpoint_step`` and ``eval/<phase>/<benchmark>/pass@<k>`` (W&B
plots them against the checkpoint step: ``define_metric``), a table ``eval/<phase>/pass_at_k_table`` and a summary
entry ``eval/<phase>/step_<s>``. ``fgrpo_eval/wandb_ledger.json`` records what was logged (written after W&B
closed the run, so a killed job logs its rows again at the same W&B steps, never skips one).
"""

from __future__ import annotations

from pathlib import Path

from fgrpo_verl.evaluation.checkpoint_eval import pass_label
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.job import checkpoints as ck

LEDGER = "wandb_ledger.json"


def log_to_wandb(plan: Plan, phase: str, ordered: list[tuple[int, dict]]) -> list[int]:
    """Log ``ordered`` (ascending steps, each with its result) to the run's W&B run; returns the steps logged."""
    run_dir = Path(plan.run_dir)
    ledger_path = run_dir / ck.EVAL_DIR / LEDGER
    ledger = ck.read_json(ledger_path) or {"rows": []}
    label = pass_label(plan, phase)
    done = {(row["label"], row["step"]) for row in ledger["rows"]}
    new = [(s, r) for s, r in ordered if (label, s) not in done]
    if not new:
        return []
    import wandb

    _, total = ck.step_plan(run_dir, plan.steps.save_freq, plan.steps.total)
    run = wandb.init(project=plan.project, id=plan.wandb.run_id, resume="allow", name=plan.experiment)
    run.define_metric("eval/checkpoint_step")
    run.define_metric("eval/*", step_metric="eval/checkpoint_step")
    rows = list(ledger["rows"])
    for step, result in new:
        wandb_step = int(total) + len(rows) + 1
        row: dict = {"eval/checkpoint_step": step}
        table = wandb.Table(columns=["checkpoint_step", "benchmark", "k", "pass_at_k", "num_problems", "n"])
        summary = {}
        for column, by_k in result["pass_at_k"].items():
            for k, value in sorted(by_k.items(), key=lambda kv: int(kv[0])):
                row[f"eval/{phase}/{column}/pass@{k}"] = value
                table.add_data(step, column, int(k), value, result["num_problems"].get(column), result["settings"]["n"])
                summary.setdefault(column, {})[f"pass@{k}"] = value
        row[f"eval/{phase}/pass_at_k_table"] = table
        run.log(row, step=wandb_step)
        run.summary[f"eval/{phase}/step_{step}"] = summary
        rows.append({"label": label, "phase": phase, "step": step, "wandb_step": wandb_step})
    if phase == "final":
        run.summary["eval/selected_step"] = new[-1][0]
    run.finish()
    ck.write_json(ledger_path, {"run_id": plan.wandb.run_id, "rows": rows})
    return [s for s, _ in new]
