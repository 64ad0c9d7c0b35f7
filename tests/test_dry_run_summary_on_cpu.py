"""``launch --dry-run`` as a person reads it: a table per recipe with totals, each distinct preflight once, and the
inputs a submit needs that are missing here (each with the command that fixes it); scripts only on request."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf


@pytest.fixture(scope="module")
def paper_main_dry_run(tmp_path_factory):
    """``launch paper_main --dry-run --script-dir DIR`` in a folder with none of the sweep's inputs (in-process:
    the command's own code, each of the 36 runs checked with verl as it is planned)."""
    import contextlib
    import io
    import os

    from fgrpo_verl.cli import main

    workdir = tmp_path_factory.mktemp("empty_launch_dir")
    scripts = workdir / "scripts"
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    env = os.environ.pop("FGRPO_SYNLOGIC_SCORER", None)
    try:
        os.chdir(workdir)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["launch", "paper_main", "--dry-run", "--script-dir", str(scripts)])
    finally:
        os.chdir(cwd)
        if env is not None:
            os.environ["FGRPO_SYNLOGIC_SCORER"] = env
    return {"rc": rc, "out": out.getvalue(), "err": err.getvalue(), "workdir": workdir, "scripts": scripts}


def test_the_dry_run_is_a_table_with_totals_and_a_readiness_list(paper_main_dry_run):
    r = paper_main_dry_run
    assert r["rc"] == 3, r["err"]
    lines = r["out"].splitlines()
    assert len(lines) < 100, len(lines)  # a screenful or two, not a wall of scripts
    assert "#SBATCH" not in r["out"] and "### job" not in r["out"]
    header = next(line for line in lines if line.startswith("run "))
    for column in ("nodes x GPUs", "steps", "train GPU-h", "eval GPU-h", "checkpoints", "preflight"):
        assert column in header
    rows = [line for line in lines if line.startswith(("qwen25_7b-", "qwen3_4b_base-", "llama32_3b_instruct-"))]
    assert len(rows) == 36 and all("2 x 8" in row and row.rstrip().endswith("passed") for row in rows), rows
    # no data here: steps unknown, training cost per step; checkpoints: one per epoch, 10 epochs
    assert all("/step)" in row for row in rows)
    total = next(line for line in lines if line.startswith("total (36 runs)"))
    assert "/step)" in total and "6,524" in total and "TB" in total, total
    assert "FLOP/s per GPU" in r["out"]
    # what each job asks Slurm for, from the scripts a submit renders: 36 training jobs, 72 evaluation jobs
    asks = lines[lines.index(next(x for x in lines if x.startswith("Slurm requests"))) + 1:]
    asks = [x.strip() for x in asks[:asks.index("")]]
    # training jobs take whole nodes, with all their memory (render.TRAIN_MEM: a site's default would be too little)
    assert asks[0] == ("training, 36 jobs: --nodes=2 --gpus-per-node=8 --cpus-per-task=64 --mem=0 --time=1-00:00:00 "
                       "--exclusive")
    assert sum(int(x.split(", ")[1].split()[0]) for x in asks[1:] if x.startswith("evaluation")) == 72
    assert any(x.startswith("evaluation, 72 jobs: --nodes=1 --gpus-per-node=8") and "--mem=68G" in x for x in asks)
    ready = lines.index(next(line for line in lines if line.startswith("NOT READY")))
    missing = "\n".join(lines[ready:])
    assert "training data data/deepscaler/train.parquet" in missing and "prepare-deepscaler" in missing
    for model in ("Qwen/Qwen2.5-7B", "Qwen/Qwen3-4B-Base", "meta-llama/Llama-3.2-3B-Instruct"):
        assert f"model {model}: not in the Hugging Face cache" in missing
    assert "gated" in next(line for line in lines if "meta-llama/Llama-3.2-3B-Instruct" in line)
    assert "prepare-benchmarks --out" in missing and "FGRPO_SYNLOGIC_SCORER=module:function" in missing


def test_the_scripts_go_to_the_folder_named_as_a_submit_names_them(paper_main_dry_run):
    r = paper_main_dry_run
    written = sorted(p.name for p in r["scripts"].glob("*.sbatch"))
    training = [n for n in written if not n.endswith(("-selection.sbatch", "-final.sbatch"))]
    assert len(training) == 36 and len(written) == 36 * 3, written[:5]
    assert f"{len(written)} script(s) written to {r['scripts']}" in r["out"]
    one = r["scripts"] / training[0]
    assert one.read_text().startswith("#!") and "#SBATCH" in one.read_text()


def test_a_submit_refuses_what_the_dry_run_lists(paper_main_dry_run, capsys):
    """The readiness list is made of the submit's own checks: the first one it meets stops the submit."""
    import os

    from fgrpo_verl.cli import main

    cwd = os.getcwd()
    try:
        os.chdir(paper_main_dry_run["workdir"])
        rc = main(["launch", "paper_main", "--only", "qwen25_7b-grpo-g0p0"])
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert rc == 2 and "training data data/deepscaler/train.parquet not found" in err, err
    # in the words the dry run listed it
    (listed,) = [line for line in paper_main_dry_run["out"].splitlines() if line.startswith("- training data")]
    assert listed[2:].rsplit(" [", 1)[0] in err, (listed, err)


def _config(kl: bool = False, in_reward: bool = False, batch: int = 4, n: int = 2):
    return OmegaConf.create({
        "data": {"train_batch_size": batch, "max_prompt_length": 100, "max_response_length": 300},
        "actor_rollout_ref": {"rollout": {"n": n}, "actor": {"use_kl_loss": kl}},
        "algorithm": {"use_kl_in_reward": in_reward},
    })


def test_training_gpu_hours_scale_with_the_samples_and_the_model_and_a_kl_term_costs_a_reference_pass():
    from fgrpo_verl.evaluation.cost import REFERENCE_PARAMS, CostAssumptions
    from fgrpo_verl.launch.summary import training_gpu_hours_per_step as hours

    a = CostAssumptions(tokens_per_gpu_second_7b=1000.0, mean_response_fraction=0.5,
                        training_flops_per_gpu_second=1e12)
    p = REFERENCE_PARAMS
    base = hours(_config(), p, a)
    # every sample is decoded and trained on: twice the prompts, or twice the group size, is twice the step
    assert hours(_config(batch=8), p, a) == pytest.approx(2 * base) == hours(_config(n=4), p, a)
    # a model twice the size decodes at half the rate and costs twice the FLOPs
    assert hours(_config(), 2 * p, a) == pytest.approx(2 * base)
    # a KL term, in the loss or in the reward, adds the reference model's forward pass to the update only
    kl, reward_kl = hours(_config(kl=True), p, a), hours(_config(in_reward=True), p, a)
    assert kl == pytest.approx(reward_kl) and base < kl < 2 * base
    slow = CostAssumptions(tokens_per_gpu_second_7b=1000.0, mean_response_fraction=0.5,
                           training_flops_per_gpu_second=5e11)
    assert hours(_config(kl=True), p, slow) - hours(_config(), p, slow) == pytest.approx(2 * (kl - base))


def test_a_recipe_may_set_the_training_throughput_and_bad_values_are_named():
    from fgrpo_verl.evaluation.cost import CostAssumptions

    assert CostAssumptions.parse({"training_flops_per_gpu_second": 2e14}, "evaluation.cost") \
        .training_flops_per_gpu_second == 2e14
    with pytest.raises(ValueError, match=r"^evaluation.cost.training_flops_per_gpu_second must be > 0.0, got 0$"):
        CostAssumptions.parse({"training_flops_per_gpu_second": 0}, "evaluation.cost")


def test_readiness_is_empty_when_every_input_is_here_and_names_each_missing_one(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fgrpo_verl.launch.summary import readiness

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1, '
                                       '"num_attention_heads": 1, "intermediate_size": 8}')
    (model / "model.safetensors").write_bytes(b"\0" * 8)
    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "data" / "train.parquet")

    def job(train, path):
        config = OmegaConf.create({"data": {"train_files": train}, "actor_rollout_ref": {"model": {"path": path}}})
        return SimpleNamespace(config=config, run_label=f"run-{train}", evaluation=None)

    assert readiness([job("data/train.parquet", str(model))], tmp_path) == []
    lines = readiness([job("data/nope.parquet", str(model)), job("data/nope.parquet", str(tmp_path / "absent"))],
                      tmp_path)
    assert len(lines) == 2, lines
    assert lines[0].startswith("- training data data/nope.parquet not found") and lines[0].endswith("[2 runs]")
    assert f"model {tmp_path / 'absent'}: does not exist here" in lines[1] and lines[1].endswith("[run-data/nope.parquet]")


def test_script_dir_is_refused_before_planning_when_it_cannot_be_a_folder(tmp_path, monkeypatch, capsys):
    from fgrpo_verl.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    assert main(["launch", "maze", "--dry-run", "--script-dir", "afile"]) == 2
    assert capsys.readouterr().err.strip() == "fgrpo-verl launch: error: --script-dir afile: exists and is not a folder"
    assert main(["launch", "maze", "--script-dir", "-"]) == 2  # a submit: scripts go to a folder
    assert "--script-dir - (print the scripts) is for --dry-run" in capsys.readouterr().err


@pytest.mark.parametrize("trainer, count", [
    ({}, 10),                                                   # one per epoch, all kept
    ({"max_actor_ckpt_to_keep": 3}, 3),
    ({"max_actor_ckpt_to_keep": 0}, 10),                        # verl: not a positive bound keeps them all
    ({"max_actor_ckpt_to_keep": -1}, 10),
    ({"remove_previous_ckpt_in_save": True}, 1),                # verl keeps only the newest
])
def test_checkpoint_storage_follows_verls_keep_rules(trainer, count, monkeypatch):
    from fgrpo_verl.launch import disk

    monkeypatch.setattr(disk, "model_params", lambda path: 1e9)
    config = OmegaConf.create({"actor_rollout_ref": {"model": {"path": "m"}},
                               "trainer": {"save_freq": -1, "save_per_epoch": True, "total_epochs": 10,
                                           "total_training_steps": None, **trainer}})
    each, kept, total = disk.checkpoint_storage(config, None)
    assert kept == count
    # the optimizer states stay in the resume point and a newer one only, unless a user keeps them all
    assert total == kept * each if kept <= 2 else total < kept * each
    monkeypatch.setenv("FGRPO_KEEP_OPTIMIZER_STATES", "1")
    assert disk.checkpoint_storage(config, None)[2] == kept * each


def test_readiness_names_a_scorer_that_does_not_resolve_once_with_the_fixes_that_apply(tmp_path, monkeypatch):
    """A scorer read from a variable (paper_main's SynLogic: ``${FGRPO_SYNLOGIC_SCORER}``) that does not import here:
    one line naming it once, why, and both ways to fix it (the module on PYTHONPATH, or the recipe's key)."""
    from fgrpo_verl.launch.eval_spec import EvalSpec
    from fgrpo_verl.launch.summary import readiness

    (tmp_path / "b.jsonl").write_text('{"problem": "1+1", "answer": "2"}\n')
    monkeypatch.setenv("MY_SCORER", "no_such_module_xyz:compute_score")
    spec = EvalSpec.parse({"benchmarks": {"Logic": {"file": "b.jsonl", "scorer": "${MY_SCORER}"}},
                           "select_by": "Logic"}, "evaluation")
    (tmp_path / "data").mkdir()
    job = SimpleNamespace(config=OmegaConf.create({"data": {"train_files": "x.parquet"},
                                                   "actor_rollout_ref": {"model": {"path": str(tmp_path)}}}),
                          run_label="r", evaluation=SimpleNamespace(spec=spec, workdir=tmp_path))
    (line,) = [x for x in readiness([job], tmp_path) if "Logic" in x]
    assert line.count("no_such_module_xyz:compute_score") == 1, line
    assert "does not resolve here" in line and "PYTHONPATH" in line and "evaluation.benchmarks.Logic.scorer" in line
    # a scorer that imports but is misspelt: no module to install, only the recipe (or the variable) to fix
    monkeypatch.setenv("MY_SCORER", "os:no_such_function")
    spec = EvalSpec.parse({"benchmarks": {"Logic": {"file": "b.jsonl", "scorer": "${MY_SCORER}"}},
                           "select_by": "Logic"}, "evaluation")
    job.evaluation = SimpleNamespace(spec=spec, workdir=tmp_path)
    (line,) = [x for x in readiness([job], tmp_path) if "Logic" in x]
    assert "PYTHONPATH" not in line and "fix evaluation.benchmarks.Logic.scorer" in line, line


def test_a_jobs_request_is_read_from_its_script_as_sbatch_reads_it():
    """Every option that sizes a job, unquoted as sbatch reads it; names, logs and signals are no request."""
    from fgrpo_verl.launch.summary import _request

    script = ('#!/bin/bash\n#SBATCH --job-name="x y"\n#SBATCH --nodes="2"\n#SBATCH --gres=gpu:8\n'
              '#SBATCH --cpus-per-gpu="8"\n#SBATCH --constraint="a\\"b&c|d"\n#SBATCH --signal="B:USR1@900"\n'
              '#SBATCH --exclusive\necho "#SBATCH --mem=1G"\n')
    assert _request(script) == '--nodes=2 --gres=gpu:8 --cpus-per-gpu=8 --constraint=a"b&c|d --exclusive'
    # read back as render.py quoted it
    from fgrpo_verl.launch.render import sbatch_quote, sbatch_unquote

    for value in ('a"b&c|d', "x\\y", 'q\\"z', "gpu:8", "1-00:00:00"):
        assert sbatch_unquote(sbatch_quote("t", value)) == value


@pytest.mark.parametrize("resources, asked", [
    ({}, "--mem=0"),  # all of each node's memory: a site's default per CPU would be too little for verl's start-up
    ({"mem": "500G"}, "--mem=500G"),
    ({"extra": ["--mem-per-gpu=60G"]}, None),  # sbatch takes one memory option: the recipe's
])
def test_a_training_job_asks_for_host_memory_and_a_recipe_sets_how_much(tmp_path, resources, asked):
    import yaml

    from fgrpo_verl.config.paths import recipes_dir
    from fgrpo_verl.launch import plan_jobs
    from fgrpo_verl.launch.summary import request_lines

    recipe = yaml.safe_load((recipes_dir() / "controls.yaml").read_text(encoding="utf-8"))
    recipe["resources"] = {**recipe["resources"], **resources}
    path = tmp_path / "controls.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    (job,) = plan_jobs(str(path), ["grpo-kl"], [], tmp_path / "logs", tmp_path, evaluation=False, check=False)[1]
    (line,) = request_lines([job])
    memory = [word for word in line.split() if word.startswith("--mem")]
    assert memory == ([asked] if asked else ["--mem-per-gpu=60G"]), line
