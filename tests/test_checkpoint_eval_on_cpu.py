"""What an evaluation job does (fgrpo_verl/evaluation/eval_job.py, checkpoint_eval.py), on CPU, without Slurm: verl's real model
merger on checkpoints in verl's FSDP layout (one rank: the weights of a tiny Qwen2, built here), `fgrpo-verl eval`
with the transformers back-end, results beside each checkpoint, W&B offline rows read back from W&B's own files.

Failure modes: a rerun redoes nothing (no merge, no sample, no W&B row); a rewritten checkpoint or an edited
benchmark file is evaluated anew; a stop checkpoint between epochs is not a candidate; an unfinished run is
evaluated but not logged; the final pass refuses until the run is finished; several workers give the same numbers
as one. The four tests that merge and sample are marked e2e (about 2 minutes together on 2 busy cores)."""

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fgrpo_verl.evaluation import checkpoint_eval as ce
from fgrpo_verl.evaluation import eval_job
from fgrpo_verl.evaluation.options import EngineOptions
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.job import checkpoints as ck

sys.path.insert(0, str(Path(__file__).parent))


def save_verl_checkpoint(model_dir: Path, actor: Path, scale: float = 1.0) -> None:
    """``actor/`` as verl's FSDP checkpoint manager leaves it for one rank: huggingface/ (config, tokenizer),
    fsdp_config.json and model_world_size_1_rank_0.pt (the state dict)."""
    import torch
    from transformers import AutoModelForCausalLM

    (actor / "huggingface").mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors"):
            shutil.copy(f, actor / "huggingface" / f.name)
    state = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    torch.save({k: v * scale if v.is_floating_point() else v for k, v in state.items()},
               actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from evaluation_tiny_lm import build_tiny_lm

    root = tmp_path_factory.mktemp("ckpt_eval")
    model = build_tiny_lm(root / "model")
    run = root / "template_run"
    for step, scale in ((2, 1.0), (3, 1.0), (4, 1.5)):  # 3: a stop checkpoint between the epochs 2 and 4
        save_verl_checkpoint(model, run / f"global_step_{step}" / "actor", scale)
    (run / "latest_checkpointed_iteration.txt").write_text("4")
    ck.write_steps(run, 2, 2, 4, 8, 4)
    bench = root / "bench.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n"
                             for i in range(6)))
    return root, run, bench


def make_plan(root: Path, run: Path, bench: Path, **extra) -> Plan:
    plan = {"recipe": "t", "run": "r", "experiment": "exp", "project": "p", "run_dir": str(run), "gamma": 0.0,
            "wandb": {"run_id": f"id{abs(hash(str(run))) % 10**8}", "log": True},
            "steps": {"save_freq": 2, "total": 4, "train_batch_size": 4, "group_size": 4, "epochs_only": None},
            # the tiny model is not a solver: a parity scorer gives pass@k strictly between 0 and 1
            "benchmarks": {"A": {"file": str(bench), "scorer": "cpu_backend_parity_reward:compute_score",
                                 "group": "math"}},
            "averages": {}, "select_by": "A",
            "passes": {"selection": {"n": 4, "benchmarks": ["A"]}, "final": {"n": 8, "benchmarks": ["A"]}},
            "protocol": "select",
            "sampling": {"backend": "transformers", "temperature": 1.0, "top_p": 1.0, "seed": 0, "threshold": 1.0,
                         "prompt_preset": "none", "max_new_tokens": 6},
            "setting_source": "test", "engine": {"device": "cpu", "batch_size": 8, "problems_per_call": 2},
            "gpus": 1, "workers": 1, "baseline": None}
    plan.update(extra)
    return Plan.read(plan)


@pytest.fixture(scope="module")
def merged_template(built):
    """The template run with its epoch checkpoints already merged by verl's model merger (ce.ensure_merged, the
    job's own step). A copy keeps the checkpoint signatures (same mtimes), so its evaluation reuses these merges:
    the tests that are not about merging start from here. Merging inside a pass stays covered: a rewritten
    checkpoint is merged again (the selection test), and the final-pass test's job merges a copy of the unmerged
    template before its two workers start."""
    root, template, _ = built
    run = root / "template_merged"
    shutil.copytree(template, run, copy_function=shutil.copy2)
    for step in (2, 4):
        ckpt = run / f"global_step_{step}"
        ce.ensure_merged(ckpt, ck.signature(ckpt / "actor"))
    return run


def copy_run(built, name: str, template: Path | None = None) -> Path:
    root = built[0]
    run = root / name
    # same mtimes: same signatures as the template
    shutil.copytree(template or built[1], run, copy_function=shutil.copy2)
    return run


def wandb_rows(root: Path, run_id: str) -> list[dict]:
    from test_wandb_offline_on_cpu import read_history

    return [row for folder in sorted((root / "wandb").glob(f"offline-run-*-{run_id}"))
            for row in read_history(folder / f"run-{run_id}.wandb", finished=True)
            if "eval/checkpoint_step" in row]


@pytest.fixture
def wandb_dir(built, monkeypatch):
    root = built[0]
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(root))
    monkeypatch.setenv("WANDB_SILENT", "true")
    return root


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_selection_pass_evaluates_each_epoch_checkpoint_once_and_logs_it_to_wandb(built, merged_template, wandb_dir,
                                                                                   capsys):
    root, _, bench = built
    run = copy_run(built, "sel", merged_template)
    plan = make_plan(root, run, bench)
    label = ce.pass_label(plan, "selection")
    assert eval_job.run_phase(plan, "selection") == 0
    out = capsys.readouterr().out
    assert "checkpoints [3] are not epoch checkpoints" in out
    # the copies carry the template's merges, made from these very weights: reused, not made again
    assert "merging" not in out
    results = {s: ck.current_result(run, s, label) for s in (2, 4)}
    assert all(results.values()) and ck.read_json(ck.result_path(run, 3, label)) is None
    for step in (2, 4):
        assert (run / f"global_step_{step}" / ck.EVAL_DIR / "merged_hf" / "fgrpo_merge.json").is_file()
        assert 0 < results[step]["pass_at_k"]["A"]["1"] < 1
    rows = wandb_rows(wandb_dir, plan.wandb.run_id)
    assert [r["eval/checkpoint_step"] for r in rows] == [2, 4] and [r["_step"] for r in rows] == [5, 6]
    assert rows[1]["eval/selection/A/pass@4"] == pytest.approx(results[4]["pass_at_k"]["A"]["4"])

    # a rerun (a requeued job after the work was done): nothing merged, sampled or logged again
    marker = run / "global_step_2" / ck.EVAL_DIR / "merged_hf" / "fgrpo_merge.json"
    merged_at = marker.stat().st_mtime_ns
    generations = Path(results[2]["generations"][0]).read_bytes()
    assert eval_job.run_phase(plan, "selection") == 0
    out = capsys.readouterr().out
    assert out.count("was evaluated on this unchanged checkpoint: skipped") == 2 and "merging" not in out
    assert "nothing new to log" in out
    assert marker.stat().st_mtime_ns == merged_at and Path(results[2]["generations"][0]).read_bytes() == generations
    assert len(wandb_rows(wandb_dir, plan.wandb.run_id)) == 2

    # verl trains step 4 again (a run resumed from an earlier checkpoint): merged and evaluated anew
    save_path = run / "global_step_4" / "actor" / "model_world_size_1_rank_0.pt"
    shutil.rmtree(run / "global_step_4" / "actor")
    save_verl_checkpoint(root / "model", run / "global_step_4" / "actor", 0.5)
    assert save_path.is_file()
    assert eval_job.run_phase(plan, "selection") == 0
    out = capsys.readouterr().out
    assert "global_step_4: merging" in out and "global_step_2: merging" not in out
    assert f"{run}/global_step_4/{ck.EVAL_DIR}/{label} holds an evaluation of other weights" in out
    assert ck.current_result(run, 4, label)["signature"] != results[4]["signature"]

    # an edited benchmark file: every result of it is stale
    text = bench.read_text()
    try:
        bench.write_text(text.replace('"answer": "2"', '"answer": "two"'))
        prepared = ce.prepare_checkpoint(plan, "selection", 2, 1)
        assert prepared is None and not (run / "global_step_2" / ck.EVAL_DIR / label / ck.RESULT).exists()
    finally:
        bench.write_text(text)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_an_unfinished_run_is_evaluated_but_not_logged_and_its_final_pass_waits(built, merged_template, wandb_dir,
                                                                                 capsys):
    root, _, bench = built
    run = copy_run(built, "unfinished", merged_template)
    ck.write_steps(run, 2, 2, 6, 8, 4)  # 6 steps in all; the run stopped after 4
    plan = make_plan(root, run, bench)
    assert eval_job.run_phase(plan, "selection") == 0
    out = capsys.readouterr().out
    assert "training not finished (step 4 of 6)" in out and "W&B logging waits for the finished run" in out
    assert "W&B run" not in out
    assert wandb_rows(wandb_dir, plan.wandb.run_id) == []
    assert eval_job.run_phase(plan, "final") == 1
    assert "no checkpoint can be selected yet: training not finished (step 4 of 6)" in capsys.readouterr().out
    assert not (run / ck.EVAL_DIR / eval_job.SELECTED).exists()


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_final_pass_selects_by_the_protocol_and_workers_give_the_numbers_of_one_process(built, merged_template,
                                                                                          wandb_dir, capsys,
                                                                                          monkeypatch):
    root, _, bench = built
    # worker processes import the scorer (a module of tests/) themselves
    tests = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p))
    base = copy_run(built, "base", merged_template)
    focal = copy_run(built, "focal")  # unmerged: the job merges each checkpoint before its workers start
    base_plan = make_plan(root, base, bench)
    assert eval_job.run_phase(base_plan, "selection") == 0
    label = ce.pass_label(base_plan, "selection")
    scores = {s: ck.current_result(base, s, label)["pass_at_k"]["A"]["1"] for s in (2, 4)}
    # the focal run: two worker processes, each evaluating half of every checkpoint's problems
    focal_plan = make_plan(root, focal, bench, gamma=1.0, workers=2,
                           baseline={"run": "r", "experiment": "exp", "run_dir": str(base),
                                     "steps": base_plan.steps.model_dump()})
    capsys.readouterr()
    assert eval_job.run_phase(focal_plan, "selection") == 0
    out = capsys.readouterr().out
    assert out.index("global_step_2: merging") < out.index("global_step_4: merging") < out.index("worker 0")
    for step in (2, 4):
        # the same weights (copies of one checkpoint), the same seeds: the same samples, however split
        assert ck.current_result(focal, step, label)["pass_at_k"] == ck.current_result(base, step, label)["pass_at_k"]
        assert ck.current_result(focal, step, label)["shards"] == 2
    capsys.readouterr()

    assert eval_job.run_phase(base_plan, "final") == 0
    best = min((2, 4), key=lambda s: (-scores[s], s))
    selected = ck.read_json(base / ck.EVAL_DIR / eval_job.SELECTED)
    assert selected["step"] == best and "over all checkpoints" in selected["how"]
    final = ck.current_result(base, best, ce.pass_label(base_plan, "final"))
    assert final["settings"]["n"] == 8
    rows = wandb_rows(wandb_dir, base_plan.wandb.run_id)
    assert [(r["eval/checkpoint_step"], "eval/final/A/pass@8" in r) for r in rows] == [(2, False), (4, False),
                                                                                       (best, True)]
    assert eval_job.run_phase(focal_plan, "final") == 0
    chosen = ck.read_json(focal / ck.EVAL_DIR / eval_job.SELECTED)
    assert chosen["step"] <= best and f"baseline r's selected step {best}" in chosen["how"]


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_a_checkpoint_with_merged_weights_is_not_merged_again(built, capsys):
    """checkpoint.save_contents with hf_model: verl already wrote the weights to actor/huggingface."""
    root, _, bench = built
    run = root / "hf"
    actor = run / "global_step_2" / "actor"
    save_verl_checkpoint(root / "model", actor)
    for f in (root / "model").glob("*.safetensors"):
        shutil.copy(f, actor / "huggingface" / f.name)
    (run / "latest_checkpointed_iteration.txt").write_text("2")
    plan = make_plan(root, run, bench, steps={"save_freq": 2, "total": 2, "train_batch_size": 4, "group_size": 4,
                                              "epochs_only": None}, wandb={"run_id": "x", "log": False})
    assert eval_job.run_phase(plan, "selection") == 0
    assert "merging" not in capsys.readouterr().out and not (run / "global_step_2" / ck.EVAL_DIR / "merged_hf").exists()


def test_a_plan_that_is_not_json_or_not_this_versions_is_refused_in_one_line(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    assert eval_job.main(["selection", "--plan", str(bad)]) == 2
    assert "cannot read the plan" in capsys.readouterr().err
    other = make_plan(tmp_path, tmp_path / "run", tmp_path / "b.jsonl").model_dump()
    other["sampling"]["top_k"] = 20   # a key this version does not know
    bad.write_text(json.dumps(other))
    assert eval_job.main(["selection", "--plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot read the plan {bad}: plan.sampling.top_k: unknown key; valid keys" in err
    assert err.rstrip().endswith("launch the recipe again to plan it")


def test_save_per_epoch_sets_save_freq_to_verls_own_epoch(tmp_path):
    from omegaconf import OmegaConf

    from fgrpo_verl.job import save_per_epoch

    config = OmegaConf.create({"trainer": {"save_freq": 3, "save_per_epoch": True, "default_local_dir": str(tmp_path)},
                               "data": {"train_batch_size": 4}})
    OmegaConf.set_struct(config, True)
    trainer = type("T", (), {"config": config, "steps_per_epoch": 2, "train_dataset": [0] * 8,
                             "total_training_steps": 4})()
    record = save_per_epoch.apply(trainer)
    assert config.trainer.save_freq == 2 and record == ck.read_steps(tmp_path)
    assert record == {"steps_per_epoch": 2, "save_freq": 2, "total_training_steps": 4, "train_rows_kept": 8,
                      "train_batch_size": 4}
    off = copy.deepcopy(trainer)
    off.config = OmegaConf.create({"trainer": {"save_freq": 3}, "data": {"train_batch_size": 4}})
    assert save_per_epoch.apply(off) is None and off.config.trainer.save_freq == 3
    trainer.steps_per_epoch = 0
    with pytest.raises(ValueError, match="fewer than one batch"):
        save_per_epoch.apply(trainer)


def test_workers_split_the_visible_gpus_by_tensor_parallel_size(monkeypatch):
    cpu = make_plan(Path("/root"), Path("/run"), Path("/bench.jsonl"))
    plan = cpu.model_copy(update={"engine": EngineOptions(tensor_parallel_size=2), "gpus": 8, "workers": 1,
                                  "sampling": cpu.sampling.model_copy(update={"backend": "vllm"})})

    def tp(size):
        return plan.model_copy(update={"engine": EngineOptions(tensor_parallel_size=size)})

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert eval_job._gpu_slices(plan) == ["0,1", "2,3", "4,5", "6,7"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")  # what Slurm gave the job
    assert eval_job._gpu_slices(tp(1)) == ["4", "5", "6"]
    assert eval_job._gpu_slices(plan) == ["4,5"]
    with pytest.raises(ValueError, match="needs 4 GPUs, this job sees 3"):
        eval_job._gpu_slices(tp(4))
    assert eval_job._gpu_slices(plan.model_copy(update={"sampling": cpu.sampling, "workers": 3})) == [None] * 3


def test_a_job_planned_by_another_version_is_refused_in_one_line():
    """Job scripts of an earlier version ran the evaluator as fgrpo_verl.evaluation.checkpoint_eval."""
    done = subprocess.run([sys.executable, "-m", "fgrpo_verl.evaluation.checkpoint_eval", "selection", "--plan", "-"],
                          input="{}", capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "planned by another version of fgrpo-verl" in done.stderr and "launch the recipe again" in done.stderr


# a checkpoint's evaluation holding its shard's --out, on a file system without flock (filelock's marker file)
HOLDER = textwrap.dedent("""
    import errno, fcntl, os, sys, time
    from pathlib import Path

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    fcntl.flock = no_flock
    from fgrpo_verl.evaluation import eval_job
    from fgrpo_verl.evaluation.pipeline import exclusive_out

    def body(argv):
        with exclusive_out(Path(sys.argv[1])):
            print("held", flush=True)
            time.sleep(120)
        return 0

    eval_job._main = body
    sys.exit(eval_job.main([]))
""")


def test_sigterm_to_an_evaluation_releases_its_out_lock_without_flock(tmp_path):
    """The job script sends SIGTERM before a requeue, which may start the job on another node: there the marker of a
    holder that never released it could not be judged gone."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent.parent),
                                                       os.environ.get("PYTHONPATH", "")]))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        # the holder prints once it holds the lock, or exits (its stderr then says why)
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        assert [p.name for p in tmp_path.iterdir()] == ["eval-writer.lock"]  # the marker file
        holder.send_signal(signal.SIGTERM)
        assert holder.wait(timeout=60) == 128 + signal.SIGTERM, holder.stderr.read()
        assert list(tmp_path.iterdir()) == [], "the marker outlived its holder"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
