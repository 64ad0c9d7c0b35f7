"""Evaluation jobs launched with a recipe (fgrpo_verl/launch/eval_jobs.py), without Slurm: the recipe's
`evaluation:` block, the setting each run's base model implies, the baseline of each focal run, the job scripts
(dependencies, the plan they carry), what a relaunch submits, and the cost printed by --dry-run."""

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from fgrpo_verl.evaluation.cost import CostAssumptions, pass_gpu_hours
from fgrpo_verl.evaluation.model_presets import eval_setting, known_model
from fgrpo_verl.evaluation.plan import Plan
from fgrpo_verl.launch import eval_baseline, eval_memory, eval_submit, queue
from fgrpo_verl.launch import eval_jobs as ej
from fgrpo_verl.launch.eval_spec import EvalSpec
from fgrpo_verl.launch.recipe import load_recipe
from fgrpo_verl.launch.summary import eval_cost, eval_lines, eval_total

BENCH = {"AIME24": "b/AIME24.jsonl", "MATH500": "b/MATH500.jsonl", "GPQA": "b/GPQA.jsonl"}


def spec(**extra):
    raw = {"benchmarks": dict(BENCH), "averages": {"Math Avg": ["AIME24", "MATH500"]}, **extra}
    return EvalSpec.parse(raw, "r.yaml: evaluation")


# ---- the recipe block -------------------------------------------------------------------------------------------
def test_defaults_follow_the_paper():
    s = spec()
    assert s.select_by == "Math Avg" and s.protocol == "select" and s.backend == "vllm"
    assert s.selection.n == 32 and s.selection.benchmarks == ["AIME24", "MATH500"]
    assert s.final.n == 1024 and s.final.benchmarks == ["AIME24", "MATH500", "GPQA"]
    assert (s.temperature, s.top_p, s.seed, s.threshold) == (1.0, 1.0, 0, 1.0)
    assert s.benchmarks["GPQA"].scorer == "boxed" and s.benchmarks["GPQA"].group == "gpqa"
    # protocol full: one pass, the final settings on every checkpoint
    full = spec(protocol="full")
    assert list(full.passes()) == ["selection"] and full.passes()["selection"] == full.final


@pytest.mark.parametrize("raw, match", [
    ({"protocl": "select"}, r"evaluation\.protocl: unknown key; valid keys: \[.*'protocol'"),
    ({"averages": {"Math Avg": ["AIME24", "AMC"]}}, r"unknown benchmark\(s\) \['AMC'\]"),
    ({"select_by": "OOD Avg"}, "select_by='OOD Avg'"),
    ({"selection": {"n": 8, "benchmarks": ["AIME24"]}}, r"lacks \['MATH500'\]"),
    ({"protocol": "cheap"}, r"evaluation\.protocol: expected one of \['select', 'full'\] \(.*\), got 'cheap'"),
    ({"backend": "sglang"}, r"evaluation\.backend: expected one of \['vllm', 'transformers'\], got 'sglang'"),
    ({"final": {"n": 0}}, r"^r\.yaml: evaluation\.final\.n must be >= 1, got 0$"),
    ({"gpus_per_node": 6, "engine": {"tensor_parallel_size": 4}}, "not a multiple"),
    ({"engine": {"tp": 2}}, r"evaluation\.engine\.tp: unknown key; valid keys: \['tensor_parallel_size'"),
    ({"tables": ["table9"]}, r"evaluation\.tables\[0\]: expected one of \['table1', .*got 'table9'"),
    ({"cost": {"mean_response_fraction": 2}}, r"evaluation\.cost\.mean_response_fraction must be <= 1.0, got 2$"),
    ({"seed": -1}, r"evaluation\.seed must be >= 0, got -1"),
    ({"resources": {"gpus": 8}}, r"^r\.yaml: evaluation\.resources\.gpus: unknown key; valid keys: \['time'"),
    # the schema's types: nothing is converted ("32" is not a count), and the error names the key's full path
    ({"selection": {"n": "32"}}, r"^r\.yaml: evaluation\.selection\.n: expected an integer, got '32'$"),
    ({"temperature": "0.6"}, r"evaluation\.temperature: expected a number, got '0\.6'"),
    ({"seed": True}, r"evaluation\.seed: expected an integer, got True"),
    ({"seed": "${SEED}"}, r"evaluation\.seed: expected an integer, got '\$\{SEED\}'"),  # not an interpolation
    ({"engine": {"tensor_parallel_size": "2"}}, r"evaluation\.engine\.tensor_parallel_size: expected an integer"),
    ({"averages": {"Math Avg": "AIME24"}}, r"evaluation\.averages\.Math Avg: expected a list, each a string"),
    ({"benchmarks": {"A": {"file": "a", "scorr": "math"}}},
     r"evaluation\.benchmarks\.A\.scorr: unknown key; valid keys: \['file', 'scorer', 'group'\]"),
    ({"benchmarks": {"A": {"scorer": "math"}}}, r"evaluation\.benchmarks\.A\.file is required: a string"),
    ({"benchmarks": []}, r"evaluation\.benchmarks: expected a mapping"),
    ({"selection": 8}, r"evaluation\.selection: expected a mapping with keys \['n', 'benchmarks'\], got 8"),
    # inside nested lists and mappings too
    ({"selection": {"benchmarks": [["AIME24"]]}}, r"evaluation\.selection\.benchmarks\[0\]: expected a string, got \["),
    ({"tables": [{"x": 1}]}, r"evaluation\.tables\[0\]: expected one of \['table1', .*got \{"),
    ({"averages": {"Math Avg": ["AIME24", 5]}}, r"evaluation\.averages\.Math Avg\[1\]: expected a string, got 5$"),
    ({"benchmarks": {2024: "b/x.jsonl"}}, r"evaluation\.benchmarks\[2024\]: a name here is a string \(quote it\)"),
    ({"engine": {"vllm_engine_args": 3}}, r"evaluation\.engine\.vllm_engine_args: expected a string, got 3$"),
    # null for a count or a benchmark list is refused as the schema's "left out" would take the default
    ({"selection": {"n": None}}, r"evaluation\.selection\.n is null: give a value or leave the key out"),
    ({"final": {"benchmarks": None}}, r"evaluation\.final\.benchmarks is null"),
    ({"gpus_per_node": None}, r"evaluation\.gpus_per_node is null"),
    ({"benchmarks": None}, r"evaluation\.benchmarks is required"),
    ({"benchmarks": {}}, r"evaluation\.benchmarks is required"),
    ({"protocol": "cheap"}, r"\(select: a small-n selection pass on every checkpoint"),
])
def test_bad_values_are_refused_naming_the_key(raw, match):
    with pytest.raises(ValueError, match=match) as err:
        spec(**raw)
    assert "\n" not in str(err.value)


def test_benchmark_paths_and_scorers_expand_environment_variables(monkeypatch):
    monkeypatch.setenv("BENCH_DIR", "/data/b")
    monkeypatch.delenv("MY_SCORER", raising=False)
    s = EvalSpec.parse({"benchmarks": {"A": "${BENCH_DIR}/A.jsonl", "B": "${NOPE:-x}/B.jsonl",
                                       "C": {"file": "c.jsonl", "scorer": "${MY_SCORER}"}}, "select_by": "A"}, "r")
    assert s.benchmarks["A"].file == "/data/b/A.jsonl" and s.benchmarks["B"].file == "x/B.jsonl"
    assert s.benchmarks["C"].unset == ["MY_SCORER"]
    problems = ej.benchmark_problems(s, Path("/nonexistent"))
    assert any("MY_SCORER not set" in p for p in problems)
    assert any(p.startswith("benchmark file(s) of A, B not found in /data/b, /nonexistent/x: ") for p in problems)


def test_benchmark_problems_name_missing_files_and_unresolvable_scorers(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"id": 1, "problem": "1+1", "answer": "2"}\n')
    s = EvalSpec.parse({"benchmarks": {"A": "a.jsonl", "B": {"file": "a.jsonl", "scorer": "no_such_mod:fn"}},
                        "select_by": "A"}, "r")
    problems = ej.benchmark_problems(s, tmp_path)
    assert len(problems) == 1 and "benchmark B: scorer 'no_such_mod:fn' does not resolve here" in problems[0]


def _pair(setting):
    return setting.preset, setting.max_new_tokens


# ---- what the base model implies -------------------------------------------------------------------------------
def test_each_paper_model_implies_its_table_9_preset_and_length():
    assert _pair(eval_setting("Qwen/Qwen2.5-7B", 8192)) == ("qwen2.5-7b", 8192)
    assert _pair(eval_setting("Qwen/Qwen3-4B-Base", 4096)) == ("qwen3-4b-base", 4096)
    assert _pair(eval_setting("/models/Llama-3.2-3B-Instruct/", 8192)) == ("llama-3.2-3b-instruct", 8192)
    assert known_model("/scratch/qwen2.5-7b").hf_id == "Qwen/Qwen2.5-7B"
    # explicit values win, and the source says so
    setting = eval_setting("Qwen/Qwen2.5-7B", 8192, max_new_tokens=4096)
    assert setting.max_new_tokens == 4096 and "max_new_tokens" in setting.source


def test_an_unknown_model_is_an_error_naming_the_choices_never_a_default():
    with pytest.raises(ValueError) as err:
        eval_setting("/models/my-model", 1024)
    text = str(err.value)
    assert "Qwen/Qwen3-4B-Base -> preset qwen3-4b-base, 4096 tokens" in text and "evaluation.prompt_preset" in text
    with pytest.raises(ValueError, match="prompt_preset"):
        eval_setting("/models/my-model", 1024, max_new_tokens=512)  # a length alone is not enough
    assert _pair(eval_setting("/models/my-model", 180, preset="none", max_new_tokens="train")) == ("none", 180)
    with pytest.raises(ValueError, match="unknown"):
        eval_setting("/models/my-model", 180, preset="gpt", max_new_tokens=5)


# ---- paper_main planned as `launch --dry-run` plans it -----------------------------------------------------------
@pytest.fixture(scope="module")
def paper_main(tmp_path_factory):
    from fgrpo_verl.launch import plan_jobs

    work = tmp_path_factory.mktemp("plan")
    _, jobs = plan_jobs("paper_main", None, [], work / "logs", work)
    return work, {job.run.name: job for job in jobs}


def test_every_focal_run_is_selected_against_its_gamma_0_twin(paper_main):
    _, jobs = paper_main
    for name, job in jobs.items():
        model_algo, gamma = name.rsplit("-", 1)
        if gamma == "g0p0":
            assert job.baseline_job is None and len(job.evaluation.jobs) == 2
            assert job.evaluation.jobs[1].depends_on == ("selection",)
        else:
            assert job.baseline_job.run.name == f"{model_algo}-g0p0", name
            assert job.evaluation.jobs[1].depends_on == ("selection", "baseline selection")
        assert job.evaluation.jobs[0].depends_on == ("training",)


def test_each_run_is_evaluated_with_its_base_models_preset_and_length(paper_main):
    _, jobs = paper_main
    expected = {"qwen25_7b": ("qwen2.5-7b", 8192), "qwen3_4b_base": ("qwen3-4b-base", 4096),
                "llama32_3b_instruct": ("llama-3.2-3b-instruct", 8192)}
    for name, job in jobs.items():
        sampling = job.evaluation.jobs[0].plan.sampling
        assert (sampling.prompt_preset, sampling.max_new_tokens) == expected[name.split("-")[0]], name
        assert f"preset {sampling.prompt_preset}, {sampling.max_new_tokens} new tokens" in eval_lines(job)[0]


def test_training_time_validation_is_on_where_the_paper_used_it(paper_main):
    _, jobs = paper_main
    validating = sorted(n for n, j in jobs.items() if int(j.config.trainer.test_freq) > 0)
    assert validating == sorted(f"qwen3_4b_base-{a}-{g}" for a in ("cispo", "dapo", "grpo") for g in ("g0p0", "g0p5"))
    for name in validating:
        config = jobs[name].config
        assert int(config.trainer.test_freq) == 25 and config.trainer.val_before_train
        assert int(config.actor_rollout_ref.rollout.val_kwargs.n) == 64
        assert float(config.actor_rollout_ref.rollout.val_kwargs.temperature) == 1.0
        assert str(config.data.val_files).endswith("benchmarks/AIME25.parquet")
    other = jobs["qwen25_7b-grpo-g0p5"].config
    assert int(other.trainer.test_freq) == -1 and not other.trainer.val_before_train


def test_validation_off_keeps_the_identity_of_the_runs_launched_before_it(tmp_path):
    """`validation=off` replaced two overrides in paper_main: the same resolved config, so the same run names."""
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.job.identity import fingerprint, unnamed_tree

    base = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=2x8", "trainer.total_epochs=10"]
    before = compose([*base, "trainer.val_before_train=false", "trainer.test_freq=-1"])
    after = compose([*base, "validation=off"])
    assert fingerprint(unnamed_tree(before), workdir=tmp_path) == fingerprint(unnamed_tree(after), workdir=tmp_path)


def test_the_job_script_carries_singleton_and_a_plan_that_reads_back(paper_main, tmp_path):
    """Rendered once: the ids of the jobs it waits for come on sbatch's command line, which the dry run shows."""
    _, jobs = paper_main
    job = jobs["qwen3_4b_base-dapo-g1p0"]
    final = job.evaluation.jobs[1]
    assert '#SBATCH --dependency="singleton"' in final.text and "afterany" not in final.text.split("\n#\n")[0]
    assert "<" not in final.text.split("\n#\n")[0]  # no placeholder left in a directive
    lines = eval_lines(job)
    assert (f"### submitted as: sbatch --parsable --dependency=afterany:<selection job>,afterany:<baseline selection"
            f" job>,singleton <script dir>/{job.job_name}-final.sbatch") in lines
    assert lines[lines.index(next(x for x in lines if x.endswith("-final.sbatch"))) + 1] == final.text
    assert f'#SBATCH --job-name="{job.job_name}"' in final.text
    assert '#SBATCH --signal="B:USR1@120"' in final.text and "#SBATCH --requeue" in final.text
    text = final.text.split("<<'FGRPO_EVAL_PLAN' &\n", 1)[1].split("\nFGRPO_EVAL_PLAN\n", 1)[0]
    plan = Plan.read(text)
    assert plan == final.plan and plan.to_json() == text and plan.engine.tensor_parallel_size == 1
    assert plan.baseline.experiment == job.baseline_job.job_name
    script = tmp_path / "job.sh"
    script.write_text(final.text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


@pytest.mark.parametrize("theirs, seen", [(None, "1"), ("0", "0")])
def test_the_evaluation_job_runs_offline_from_the_hub_unless_told_otherwise(paper_main, tmp_path, theirs, seen):
    """As training (slurm/ray_cluster.sh): HF_HUB_OFFLINE=1 for the evaluator, a value of the submitting environment
    kept. The rendered script runs with a stand-in interpreter that records what it was given."""
    import os

    _, jobs = paper_main
    text = jobs["qwen25_7b-grpo-g0p0"].evaluation.jobs[0].text
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$* HF=${{HF_HUB_OFFLINE-unset}}" >> {tmp_path / "calls"}\ncat > /dev/null\n')
    fake.chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text(re.sub(r"(?m)^export FGRPO_PYTHON=.*$", f"export FGRPO_PYTHON={fake}", text))
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(SLURM_JOB_ID="7", SLURM_JOB_NODELIST="n1", **({} if theirs is None else {"HF_HUB_OFFLINE": theirs}))
    assert subprocess.run(["bash", str(script)], env=env, cwd=tmp_path).returncode == 0
    calls = (tmp_path / "calls").read_text().splitlines()
    # the run logs to W&B online (paper_main), so W&B must answer from the node before the evaluator starts
    assert [c.split(" HF=")[0].split()[:2] for c in calls] == [["-m", "fgrpo_verl.job.run_record"],
                                                                ["-m", "fgrpo_verl.job.wandb_online"],
                                                                ["-m", "fgrpo_verl.evaluation.eval_job"]]
    assert calls[-1].endswith(f"HF={seen}")


def test_the_dry_run_prints_each_protocols_gpu_hours_from_the_configs(paper_main):
    _, jobs = paper_main
    a = CostAssumptions()
    qwen = jobs["qwen25_7b-grpo-g0p0"].evaluation
    # selection: 10 checkpoints (one per epoch) x the six math benchmarks' published sizes (1,547 problems) x 32;
    # final: 1 x the eight counted benchmarks (2,286; SynLogic's size is unknown here) x 1024; 8192 tokens, 7.62B
    sel, fin = pass_gpu_hours(1547, 32, 8192, 7.62e9, a), pass_gpu_hours(2286, 1024, 8192, 7.62e9, a)
    lines, hours = eval_cost(qwen)
    assert hours["select"] == pytest.approx(10 * sel + fin)
    assert hours["full"] == pytest.approx(10 * fin)
    assert fin == pytest.approx(2286 * 1024 * 0.25 * 8192 / 5000 / 3600)
    assert any("['SynLogic'] left out" in line for line in lines)
    # Qwen3: half the length, fewer parameters
    qwen3 = jobs["qwen3_4b_base-grpo-g0p0"].evaluation
    assert eval_cost(qwen3)[1]["full"] == pytest.approx(10 * pass_gpu_hours(2286, 1024, 4096, 4.02e9, a))
    total = eval_total(list(jobs.values()))
    select = sum(eval_cost(j.evaluation)[1]["select"] for j in jobs.values())
    assert f"protocol select {select:,.0f} GPU-hours" in total[0]
    assert "mean response = 0.25 x max_new_tokens" in total[1]


# ---- what a (re)launch submits ----------------------------------------------------------------------------------
def _fake(name, gamma, run_dir, protocol="select"):
    from test_eval_plan_on_cpu import plan_dict  # save_freq 2, total 4; selection n=4 and final n=8 on benchmark A

    plan = Plan.read({**plan_dict(), "run_dir": str(run_dir), "protocol": protocol})
    jobs = tuple(ej.EvalJob(p, plan, ()) for p in (("selection", "final") if protocol == "select" else ("selection",)))
    return SimpleNamespace(job_name=name, run=SimpleNamespace(name=name), run_label=name, evaluation=SimpleNamespace(jobs=jobs))


def test_a_fresh_launch_submits_selection_after_training_and_final_after_both_selections(tmp_path):
    base, focal = _fake("b", 0, tmp_path / "b"), _fake("f", 1, tmp_path / "f")
    decisions, notes = eval_submit.decide([base, focal], [base.evaluation, focal.evaluation], {"b": "11", "f": "12"},
                                 {}, {"b": None, "f": "b"})
    got = [(d.job_name, d.phase, d.depends_on) for d in decisions]
    sel = eval_submit.SelectionOf
    assert got == [("b", "selection", ("11",)), ("f", "selection", ("12",)), ("b", "final", (sel("b"),)),
                   ("f", "final", (sel("f"), sel("b")))] and not notes


def test_a_relaunch_submits_nothing_for_runs_with_an_evaluation_in_the_queue_and_waits_on_running_baselines(tmp_path):
    focal = _fake("f", 1, tmp_path / "f")
    # the baseline is not part of this launch (--only f) and still training: f's final pass waits for it
    decisions, notes = eval_submit.decide([focal], [focal.evaluation], {"f": None, "b": "31"}, {}, {"f": "b"})
    assert [(d.job_name, d.phase, d.depends_on) for d in decisions] == [("f", "selection", ()), ("f", "final",
                                                                                                 (eval_submit.SelectionOf("f"), "31"))]
    decisions, notes = eval_submit.decide([focal], [focal.evaluation], {"f": None}, {"f": [("40", "PENDING")]}, {"f": "b"})
    assert decisions == [] and "40 already queued" in notes[0]
    # the baseline's evaluation is in the queue: f's final pass depends on it
    decisions, _ = eval_submit.decide([focal], [focal.evaluation], {}, {"b": [("41", "RUNNING")]}, {"f": "b"})
    assert decisions[-1].depends_on == (eval_submit.SelectionOf("f"), "41")


def _fake_sbatch_and_two_runs(tmp_path, monkeypatch, fail_at: int = 0) -> tuple:
    """A fake sbatch on PATH that records its arguments and answers ids 100, 101, ... (call ``fail_at`` is refused
    as sbatch refuses a memory request the nodes cannot satisfy), and a baseline run b and a focal run f with
    evaluation jobs."""
    import os

    bin_dir, log = tmp_path / "bin", tmp_path / "sbatch.log"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(
        f'#!/bin/sh\necho "$@" >> {log}\nn=$(wc -l < {log})\n'
        f'if [ "$n" = {fail_at} ]; then echo "sbatch: error: Memory specification can not be satisfied" >&2; exit 1; fi\n'
        'echo $((99 + n))\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    jobs = []
    for name in ("b", "f"):
        job = _fake(name, 0, tmp_path / name)
        evals = tuple(ej.EvalJob(e.phase, e.plan, e.depends_on, f"#!/bin/bash\n# {name} {e.phase}\n")
                      for e in job.evaluation.jobs)
        job.evaluation = SimpleNamespace(jobs=evals)
        job.checkpoint_dir, job.fingerprint, job.overrides = tmp_path / name, "fp", ()
        jobs.append(job)
    jobs[0].baseline_job, jobs[1].baseline_job = None, jobs[0]
    (tmp_path / "scripts").mkdir()
    return log, jobs


def test_a_refused_sbatch_stops_the_launch_counting_the_jobs_it_leaves_queued(tmp_path, monkeypatch):
    """sbatch refuses the third evaluation job: the two submitted before it are recorded as they went, and the
    launch's error says how many jobs of each kind stay queued and that a relaunch submits the rest."""
    from fgrpo_verl.launch.submit import Submitted, _partly_submitted

    _, jobs = _fake_sbatch_and_two_runs(tmp_path, monkeypatch, fail_at=3)
    submitted = Submitted(training=[(jobs[0], "11"), (jobs[1], "12")])
    with pytest.raises(RuntimeError, match="Memory specification can not be satisfied"):
        eval_submit.submit_eval_jobs(jobs, {"b": "11", "f": "12"}, tmp_path / "scripts", tmp_path / "logs",
                            out=lambda *_: None, submitted=submitted.evaluation)
    assert submitted.evaluation == [("b", "selection", "100"), ("f", "selection", "101")]
    message = str(_partly_submitted(RuntimeError("sbatch failed"), submitted))
    assert message == ("sbatch failed; 2 training and 2 evaluation job(s) were submitted before it and stay queued "
                       "(job ids 11, 12, 100, 101); a relaunch without --force skips them and submits the rest")
    assert submitted.line("r") == "2 training and 2 evaluation job(s) submitted from recipe r"
    assert Submitted().line("r").startswith("nothing submitted from recipe r")
    assert str(_partly_submitted(RuntimeError("first"), Submitted())) == "first"  # nothing queued: as sbatch said


def test_dependencies_go_on_sbatchs_command_line_and_the_planned_script_is_submitted(tmp_path, monkeypatch):
    """A fake sbatch on PATH records its arguments: each evaluation job gets --dependency=afterany:<the ids it waits
    for>,singleton (the command line replaces the script's directive) and the script rendered at planning,
    unchanged; training jobs get none (their script's singleton)."""
    from fgrpo_verl.launch.render import sbatch

    log, jobs = _fake_sbatch_and_two_runs(tmp_path, monkeypatch)
    assert sbatch(tmp_path / "train.sbatch") == "100"
    done = eval_submit.submit_eval_jobs(jobs, {"b": "11", "f": "12"}, tmp_path / "scripts", tmp_path / "logs",
                               out=lambda *_: None)
    assert done == [("b", "selection", "101"), ("f", "selection", "102"), ("b", "final", "103"),
                    ("f", "final", "104")]
    argv = [line.split() for line in log.read_text().splitlines()]
    scripts = tmp_path / "scripts"
    assert argv == [
        ["--parsable", str(tmp_path / "train.sbatch")],
        ["--parsable", "--dependency=afterany:11,singleton", str(scripts / "b-selection.sbatch")],
        ["--parsable", "--dependency=afterany:12,singleton", str(scripts / "f-selection.sbatch")],
        ["--parsable", "--dependency=afterany:101,singleton", str(scripts / "b-final.sbatch")],
        ["--parsable", "--dependency=afterany:102,afterany:101,singleton", str(scripts / "f-final.sbatch")],
    ]
    assert (scripts / "f-final.sbatch").read_text() == "#!/bin/bash\n# f final\n"


def test_evaluation_jobs_request_the_host_memory_of_verls_model_merger(paper_main):
    """verl's model merger, (6 + 4/W) B per parameter (Qwen2.5-7B, 7.62B, trained on 2 x 8 GPUs: 44.4 GiB), or,
    after it (the job merges before its workers start), 8 vLLM engines for 8 GPUs at TP 1, 8 GiB each: the larger,
    + 4 GiB: 68 GiB; the recipe's value wins."""
    import math

    _, jobs = paper_main
    job = jobs["qwen25_7b-grpo-g0p0"]
    world = int(job.config.trainer.nnodes) * int(job.config.trainer.n_gpus_per_node)
    assert world == 16
    merger = (6 + 4 / 16) * 7.62e9 / 2**30
    assert math.ceil(max(merger, 8 * 8) + 4) == 68 and eval_memory.eval_host_memory(7.62e9, 16, 8) == "68G"
    assert eval_memory.eval_host_memory(7.62e9, 16) == "49G" == f"{math.ceil(merger + 4)}G"
    assert eval_memory.eval_host_memory(30e9, 16, 8) == f"{math.ceil((6 + 4 / 16) * 30e9 / 2**30 + 4)}G"
    for e in job.evaluation.jobs:
        assert '#SBATCH --mem="68G"' in e.text
    assert any(line.startswith("### eval job memory: --mem=68G = the larger of verl's model merger, (6 + 4/16) B x "
                               "7.62B params, and (after it) 8 vLLM engine(s) x 8 GiB")
               for line in eval_lines(job))
    # a memory option of the recipe's own (sbatch refuses two): no --mem beside it; --mem-bind is no amount
    theirs = spec(resources={"extra": ["--mem-per-gpu=64G"]})
    mem, line = eval_memory.eval_memory(theirs, job.config, 7.62e9)
    assert mem is None and "--mem-per-gpu=64G" in line
    assert eval_memory.eval_memory(spec(resources={"extra": ["--mem-bind=local"]}), job.config, 7.62e9)[0] == "68G"
    with pytest.raises(ValueError, match=r"^r.yaml: evaluation: resources mem=200G and --mem-per-cpu=4G: sbatch "
                                         r"takes one memory option; keep one$"):
        spec(resources={"mem": "200G", "extra": ["--mem-per-cpu=4G"]})
    # one rank holds the whole model: its shard is loaded twice
    assert eval_memory.eval_host_memory(1e9, 1) == f"{math.ceil(10e9 / 2**30 + 4)}G"
    mine = spec(resources={"mem": "300G"})
    assert eval_memory.eval_memory(mine, job.config, 7.62e9)[0] == "300G"
    text = ej.render_eval_job(load_recipe("paper_main"), job, "selection", job.evaluation.jobs[0].plan, mine,
                              Path("/l"), Path("/w"), eval_memory.eval_memory(mine, job.config, 7.62e9)[0])
    assert '#SBATCH --mem="300G"' in text
    mem, line = eval_memory.eval_memory(spec(), job.config, None)
    assert mem is None and "evaluation.resources.mem" in line


def test_a_finished_and_evaluated_run_gets_no_evaluation_job(tmp_path):
    from test_eval_selection_on_cpu import make_run

    from fgrpo_verl.evaluation import checkpoint_eval as ce
    from fgrpo_verl.evaluation.eval_job import SELECTED
    from fgrpo_verl.job import checkpoints as ck

    job = _fake("b", 0, tmp_path / "b")
    plan = job.evaluation.jobs[0].plan
    sel, fin = ce.pass_label(plan, "selection"), ce.pass_label(plan, "final")
    make_run(tmp_path, "b", [2, 4], {2: 0.1, 4: 0.2}, label=sel)
    decisions, _ = eval_submit.decide([job], [job.evaluation], {}, {}, {"b": None})
    assert [(d.phase, d.depends_on) for d in decisions] == [("final", ())]  # selection complete, final not
    run = Path(plan.run_dir)
    ck.write_json(run / ck.EVAL_DIR / SELECTED, {"step": 4, "selection_label": sel})
    sig = ck.signature(run / "global_step_4" / "actor")
    ck.write_json(ck.result_path(run, 4, fin), {"signature": sig, "pass_at_k": {}})
    assert eval_submit.decide([job], [job.evaluation], {}, {}, {"b": None})[0] == []
    assert eval_submit.progress_line(plan) == "eval: selection 2/2 checkpoints; final: step 4 evaluated"
    # an unfinished run is never "evaluated": its selection pass is due again once it trains on
    (run / "latest_checkpointed_iteration.txt").write_text("2")
    assert [d.phase for d in eval_submit.decide([job], [job.evaluation], {"b": "9"}, {}, {"b": None})[0]] == ["selection",
                                                                                                      "final"]


def test_queue_entries_of_evaluation_jobs_are_not_training(tmp_path, monkeypatch):
    """A run's jobs share its name (singleton): the ids its record holds as evaluation jobs are not its training."""
    import os

    from fgrpo_verl.job.run_record import write_record

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\nprintf '5|r|RUNNING\\n7|r|PENDING\\n8|bare|RUNNING\\n'\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    write_record(tmp_path / "r", "a" * 64, "r", [], job_id="5")
    write_record(tmp_path / "r", "a" * 64, "r", [], eval_job=("7", "selection"))
    found = queue.queued({"r": tmp_path / "r", "bare": tmp_path / "bare"})
    assert found["r"][:2] == ([("5", "RUNNING")], [("7", "PENDING")]) and found["r"][2]["jobs"] == ["5"]
    assert found["bare"] == ([("8", "RUNNING")], [], None)


def test_launch_refuses_evaluation_that_cannot_run_before_submitting_anything(tmp_path):
    """No benchmark files here: the submit stops before sbatch, naming them and --no-eval."""
    from fgrpo_verl.launch import plan_jobs

    _, jobs = plan_jobs("paper_main", ["qwen25_7b-grpo-g0p0"], [], tmp_path / "logs", tmp_path)
    with pytest.raises(ValueError) as err:
        ej.check_submission(jobs)
    assert "benchmark file(s) of AIME24, " in str(err.value) and "--no-eval" in str(err.value)
    _, bare = plan_jobs("paper_main", ["qwen25_7b-grpo-g0p0"], [], tmp_path / "logs", tmp_path, evaluation=False)
    assert bare[0].evaluation is None
    ej.check_submission(bare)
    assert re.search(r"\+trainer\.save_per_epoch=true", bare[0].text)


def test_validation_rows_carry_the_training_prompt_and_the_benchmarks_name(tmp_path):
    """validation=aime25 reads AIME25.parquet: verl rows with the training prompt; logged as val-core/AIME25/..."""
    from fgrpo_verl.data.deepscaler import SYSTEM_PROMPT
    from fgrpo_verl.data.records import write_rows
    from fgrpo_verl.evaluation.formats import load_benchmark
    from fgrpo_verl.evaluation.prepare import verl_rows

    rows = verl_rows("AIME25", [{"id": "7", "problem": "Find x.", "answer": 204}])
    assert rows[0]["data_source"] == "AIME25" and rows[0]["reward_model"]["ground_truth"] == "204"
    assert rows[0]["prompt"] == [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Find x."}]
    write_rows(rows, tmp_path / "AIME25.parquet")
    assert load_benchmark(tmp_path / "AIME25.parquet", "AIME25")[0]["answer"] == "204"
    with pytest.raises(ValueError, match="only math benchmarks"):
        verl_rows("GPQA", [{"id": "1", "problem": "q", "answer": "A"}])


def test_an_unknown_base_model_stops_the_launch_with_one_line_naming_the_choices(tmp_path, monkeypatch, capsys):
    from fgrpo_verl.cli import main as cli_main

    recipe = yaml.safe_dump({
        "name": "mine", "project": "p", "common": ["algo=grpo", "actor_rollout_ref.model.path=/models/my-7b",
                                                   "data.train_files=x.parquet", "data.val_files=x.parquet"],
        "runs": [{"name": "a", "overrides": ["algorithm.fgrpo.gamma=0.5"]}],
        "evaluation": {"benchmarks": {"AIME24": "b/AIME24.jsonl"}, "select_by": "AIME24"}})
    (tmp_path / "mine.yaml").write_text(recipe)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["launch", "mine.yaml", "--dry-run"]) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("fgrpo-verl launch: error:")]
    assert "base model '/models/my-7b' is not one of the paper's" in line and "evaluation.prompt_preset" in line
    assert "Traceback" not in err
    # --no-eval launches it anyway (training only)
    assert cli_main(["launch", "mine.yaml", "--dry-run", "--no-eval"]) == 3


def test_a_fresh_run_is_evaluated_in_its_own_directory_and_w_and_b_run(tmp_path):
    from fgrpo_verl.launch import plan_jobs

    (plain,) = plan_jobs("controls", ["grpo-kl"], [], tmp_path / "logs", tmp_path)[1]
    (fresh,) = plan_jobs("controls", ["grpo-kl"], [], tmp_path / "logs", tmp_path, fresh="20260101T000000")[1]
    for job in (plain, fresh):
        plan = job.evaluation.jobs[0].plan
        assert plan.run_dir == str(job.checkpoint_dir) and plan.wandb.run_id == job.wandb_run_id
        assert plan.experiment == job.job_name and f'#SBATCH --job-name="{job.job_name}"' in job.evaluation.jobs[0].text
    assert fresh.checkpoint_dir != plain.checkpoint_dir and fresh.wandb_run_id != plain.wandb_run_id


def _job(name, gamma, lr=1e-6):
    from omegaconf import OmegaConf

    config = OmegaConf.create({"algorithm": {"fgrpo": {"gamma": gamma}}, "trainer": {"experiment_name": name},
                               "actor_rollout_ref": {"actor": {"optim": {"lr": lr}}}})
    return SimpleNamespace(job_name=name, config=config, run=SimpleNamespace(name=name), run_label=name, command_line=(),
                           baseline_job=None)


def test_the_baseline_is_the_run_with_the_same_config_but_gamma_0():
    """Values are compared as composition leaves them (γ a float: a recipe's ``0`` and ``0.0`` are one config)."""
    focal, base, other = _job("exp-focal", 0.5), _job("exp-base", 0.0), _job("exp-other", 0.0, lr=2e-6)
    found = eval_baseline.find_baselines([focal, _job("exp-focal-1", 1.0), base], [focal, other, base])
    assert found == {"exp-focal": base, "exp-focal-1": base, "exp-base": None}  # a γ = 0 run has none
    # a different lr is another experiment
    assert eval_baseline.find_baselines([focal], [focal, other]) == {"exp-focal": None}


def test_the_dry_run_says_when_a_focal_run_has_no_baseline(tmp_path):
    evaluation = ej.RunEvaluation(_fake("x", 0, tmp_path).evaluation.jobs, spec(), tmp_path, {}, None)
    focal = _job("exp-focal", 0.5)
    focal.evaluation = evaluation
    lines = eval_lines(focal)
    assert any(line.startswith("### no γ = 0 baseline for exp-focal in the recipe") and "no compute limit" in line
               for line in lines), lines
    control = _job("exp-control", 0.0)
    control.evaluation = evaluation
    assert not any("baseline" in line for line in eval_lines(control))


@pytest.mark.parametrize("resources, named", [
    ({"mem": "200G", "extra": ["--mem-per-gpu=8G"]}, "mem=200G and --mem-per-gpu=8G"),
    ({"extra": ["--mem=10G", "--mem-per-cpu=4G"]}, "--mem=10G and --mem-per-cpu=4G"),
])
def test_a_training_jobs_resources_take_one_memory_option_too(resources, named):
    from fgrpo_verl.launch.recipe import Resources

    with pytest.raises(ValueError, match=rf"^recipes/x.yaml: resources {named}: sbatch takes one memory option"):
        Resources.parse(resources, "recipes/x.yaml")
    assert Resources.parse({"mem": "200G", "extra": ["--mem-bind=local"]}, "recipes/x.yaml").mem == "200G"
