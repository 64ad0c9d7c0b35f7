"""Never lose a sample: streaming writes, scoring after writing, scorer errors, --resume after a SIGKILL, refusals.

The generation engine is the stand-in vLLM package of tests/evaluation_tiny_lm.py (samples depend only on each
request's seed, like vLLM's seeded requests); the tokenizer is the tiny locally built one.
"""

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest

from evaluation_tiny_lm import build_tiny_lm, fake_vllm_imported, write_fake_vllm
from fgrpo_verl.cli import main
from fgrpo_verl.evaluation.formats import read_generations

TABLES = ("pass_at_k.md", "pass_at_k_long.csv", "pass_at_k_table.csv", "significance.csv")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    model = build_tiny_lm(root / "model")
    fake = write_fake_vllm(root / "fake")
    bench = root / "B.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "problem": f"q{i}", "answer": str(i % 3)}) + "\n" for i in range(24)))
    return model, fake, bench


@pytest.fixture(scope="module")
def full(setup, tmp_path_factory):
    """One uninterrupted reference run, shared by the tests (read-only)."""
    out = tmp_path_factory.mktemp("full") / "out"
    with fake_vllm_imported(setup[1]):
        assert main(_args(setup, out)) == 0
    return out


def _args(setup, out, *extra):
    model, _, bench = setup
    return ["eval", "--model", f"base={model}", "--model", f"focal={model}", "--bench", f"B={bench}", "--n", "8",
            "--samples-per-request", "4", "--problems-per-call", "2", "--scorer", "fake_scorers:flaky", "--out", str(out),
            "--no-plots", "--significance", "base:focal", "--significance-m", "4", "--significance-iterations", "200",
            *extra]


@pytest.fixture
def fake_vllm(setup):
    with fake_vllm_imported(setup[1]):
        yield


def _env(setup, **extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(setup[1]), os.environ.get("PYTHONPATH", "")]), **extra)
    return env


def test_killed_eval_resumes_to_identical_tables(setup, full, fake_vllm, tmp_path, capsys):
    # a real process, killed with SIGKILL mid-benchmark (slow stand-in engine: 0.2 s per call of 2 problems)
    killed = tmp_path / "killed"
    code = "import sys; from fgrpo_verl.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *_args(setup, killed)], env=_env(setup, FAKE_VLLM_DELAY="0.2"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gen = killed / "generations.jsonl"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and (not gen.is_file() or gen.read_text().count("\n") < 12):
            time.sleep(0.02)
        # a second eval into the same --out while the first still writes (a duplicate job, an early --resume):
        # refused, so it can neither append the same problems again nor cut the first one's line in flight
        assert proc.poll() is None, "the first eval must still be running"
        for extra in ((), ("--resume",)):
            assert main(_args(setup, killed, *extra)) == 2
            err = capsys.readouterr().err
            assert "another `fgrpo-verl eval` is writing to" in err or "already holds an evaluation" in err, err
        assert "another `fgrpo-verl eval` is writing to" in err  # the --resume one
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    lines_at_kill = gen.read_text().count("\n")
    total = (full / "generations.jsonl").read_text().count("\n")
    assert 12 <= lines_at_kill < total, "the kill must land mid-run"
    # and the worst moment: a write torn half-way (a kill inside write(); the last line has no newline)
    with gen.open("a") as fh:
        fh.write('{"run": "focal", "benchmark": "B", "problem_id": "23", "completions": ["\\\\box')

    # a rerun into the same --out without --resume refuses and leaves the file alone
    before = gen.read_bytes()
    assert main(_args(setup, killed)) == 2
    assert gen.read_bytes() == before

    assert main(_args(setup, killed, "--resume")) == 0
    for name in TABLES:
        assert (killed / name).read_text() == (full / name).read_text(), name
    want = {g.key: (g.completions, list(g.correct), g.score_errors) for g in read_generations(full / "generations.jsonl")}
    got = {g.key: (g.completions, list(g.correct), g.score_errors) for g in read_generations(gen)}
    assert got == want

    # a second --resume of a finished run generates nothing and changes nothing
    size = gen.stat().st_size
    assert main(_args(setup, killed, "--resume")) == 0
    assert gen.stat().st_size == size


def test_scorer_errors_are_recorded_per_sample_and_counted(full):
    out = full
    gens = read_generations(out / "generations.jsonl")
    errors = 0
    for g in gens:
        boxed = [t.split("{")[1].split("}")[0] for t in g.completions]
        raised = {i for i, b in enumerate(boxed) if b == "3"}
        assert set(g.score_errors or {}) == raised  # exactly the samples whose scorer raised
        assert all("ValueError: cannot parse 3" == msg for msg in (g.score_errors or {}).values())
        assert all(g.correct[i] == 0 for i in raised)
        errors += len(raised)
    assert errors > 0
    table = (out / "pass_at_k.md").read_text()
    per_run = {run: sum(len(g.score_errors or {}) for g in gens if g.run == run) for run in ("base", "focal")}
    assert f"base on B: {per_run['base']}" in table and f"focal on B: {per_run['focal']}" in table
    # completions lines come before their correctness lines: nothing was scored before it was on disk
    lines = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    first = {}
    for i, line in enumerate(lines):
        key = (line["run"], line["benchmark"], line["problem_id"])
        if "completions" in line:
            first[key] = i
        else:
            assert key in first and first[key] < i


def test_resume_refuses_other_settings_and_from_generations(setup, full, fake_vllm, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("generations.jsonl", "eval_manifest.json"):
        (out / name).write_bytes((full / name).read_bytes())
    assert main(_args(setup, out, "--resume", "--seed", "1")) == 2
    assert "seed: 0 then, 1 now" in capsys.readouterr().err
    assert main(["eval", "--from-generations", str(out / "generations.jsonl"), "--resume", "--out", str(tmp_path / "t")]) == 2
    assert "--resume continues a generation run" in capsys.readouterr().err


def _peak_bytes(setup, out, problems, tmp_path):
    bench = tmp_path / f"b{problems}.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "problem": "q", "answer": "1"}) + "\n" for i in range(problems)))
    tracemalloc.start()
    rc = main(["eval", "--model", f"m={setup[0]}", "--bench", f"B={bench}", "--n", "8", "--problems-per-call", "4",
               "--scorer", "boxed", "--out", str(out), "--no-plots"])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert rc == 0
    return peak


def test_memory_does_not_grow_with_the_number_of_problems(setup, fake_vllm, tmp_path, monkeypatch):
    """Each completion carries 4 kB; 200 problems hold 6.4 MB of text, 20 problems 0.64 MB. Only a chunk of
    4 problems (128 kB) may be in memory at once, in generation and in the table's streaming read."""
    monkeypatch.setenv("FAKE_VLLM_CHARS", "4000")
    _peak_bytes(setup, tmp_path / "warm", 4, tmp_path)  # one-time costs (lazy imports, caches) out of the way
    # a run's fixed cost (tokenizer, prompt preset, tables: ~1.2 MB with verl and vLLM imported in the process,
    # as in the full suite) is measured on 4 problems and set apart from what the problems' text may add
    fixed = _peak_bytes(setup, tmp_path / "fixed", 4, tmp_path)
    small = _peak_bytes(setup, tmp_path / "small", 20, tmp_path)
    large = _peak_bytes(setup, tmp_path / "large", 200, tmp_path)
    text_large = 200 * 8 * 4000
    assert (tmp_path / "large" / "generations.jsonl").stat().st_size > text_large
    print(f"peak bytes: 4 problems {fixed}, 20 problems {small}, 200 problems {large}")
    assert large - small < 0.1 * text_large, (fixed, small, large)
    assert large - fixed < 0.2 * text_large, (fixed, small, large)


def test_resume_scores_completions_that_reached_the_disk_without_sampling_again(setup, full, fake_vllm, tmp_path,
                                                                                monkeypatch):
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "eval_manifest.json").write_bytes((full / "eval_manifest.json").read_bytes())
    lines = (full / "generations.jsonl").read_text().splitlines(keepends=True)
    # killed between writing the last chunk's completions and their correctness lines
    kept = lines[:-2]
    assert all("completions" in line for line in lines[-4:-2]) and all("completions" not in line for line in lines[-2:])
    (cut / "generations.jsonl").write_text("".join(kept))
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    assert main(_args(setup, cut, "--resume")) == 0
    assert not log.exists()  # no engine was even built: nothing had to be sampled
    for name in TABLES:
        assert (cut / name).read_text() == (full / name).read_text(), name


def test_no_save_completions_keeps_one_correctness_line_per_problem(setup, full, fake_vllm, tmp_path):
    lean = tmp_path / "lean"
    assert main(_args(setup, lean, "--no-save-completions")) == 0
    lines = [json.loads(x) for x in (lean / "generations.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * 24 and not any("completions" in line for line in lines)
    for name in TABLES:
        assert (lean / name).read_text() == (full / name).read_text(), name


def test_a_bad_model_path_fails_before_any_sampling(setup, fake_vllm, tmp_path, monkeypatch, capsys):
    """The second --model's typo must not surface only after the first model's hours of sampling (and then be
    frozen into the manifest, so --resume with the corrected path would be refused as 'settings differ')."""
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    out = tmp_path / "out"
    args = [a.replace(f"focal={setup[0]}", f"focal={tmp_path / 'no-such-model'}") for a in _args(setup, out)]
    assert main(args) == 2
    assert "no-such-model" in capsys.readouterr().err
    assert not log.exists()  # no engine was built, nothing sampled
    assert not (out / "generations.jsonl").exists() and not (out / "eval_manifest.json").exists()


def test_resume_refuses_a_benchmark_file_edited_in_place(setup, full, fake_vllm, tmp_path, capsys):
    """Same path, other contents (a fixed reference answer): the lines on disk were scored against the old file,
    so continuing would mix two references in one table."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "generations.jsonl").write_bytes((full / "generations.jsonl").read_bytes())
    bench = tmp_path / "B.jsonl"
    bench.write_bytes(setup[2].read_bytes())
    manifest = json.loads((full / "eval_manifest.json").read_text())
    manifest["benchmarks"]["B"] = str(bench.resolve())  # as if that run had used this copy
    (out / "eval_manifest.json").write_text(json.dumps(manifest))
    args = [a.replace(f"B={setup[2]}", f"B={bench}") for a in _args(setup, out, "--resume")]
    assert main(args) == 0  # unchanged file: resumes (nothing left to do)
    before = (out / "generations.jsonl").read_bytes()
    bench.write_text(bench.read_text().replace('"answer": "0"', '"answer": "1"', 1))
    assert main(args) == 2
    assert "--bench B: the file's contents changed" in capsys.readouterr().err
    assert (out / "generations.jsonl").read_bytes() == before


HOLDER = """
import errno, fcntl, os, sys, time
from pathlib import Path
if sys.argv[2] == "noflock":  # what Lustre mounted noflock answers
    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    fcntl.flock = no_flock
from fgrpo_verl.evaluation.pipeline import exclusive_out
with exclusive_out(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("mode", ["flock", "noflock"])
def test_a_second_writer_is_refused_at_once_and_a_killed_writers_lock_is_no_obstacle(tmp_path, monkeypatch, mode):
    """The --out lock where flock works and where it answers ENOSYS (then filelock's marker file, which names the
    holder): a live holder refuses the next writer at once; one killed on this host (SIGKILL: nothing released) does
    not stop the next, which takes its lock at once."""
    import errno
    import fcntl

    from fgrpo_verl.evaluation.pipeline import exclusive_out

    def no_flock(fd, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    if mode == "noflock":
        monkeypatch.setattr(fcntl, "flock", no_flock)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), mode], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        with pytest.raises(ValueError, match="another `fgrpo-verl eval` is writing to") as err:
            with exclusive_out(tmp_path):
                pass
        named = f"pid {holder.pid} by {tmp_path / 'eval-writer.lock'}: if that process is gone"
        assert (named in str(err.value)) == (mode == "noflock") and "\n" not in str(err.value)
    finally:
        holder.kill()
        holder.wait()
    with exclusive_out(tmp_path):
        with pytest.raises(ValueError, match="another `fgrpo-verl eval` is writing to"):  # this process holds it now
            with exclusive_out(tmp_path):
                pass
    with exclusive_out(tmp_path):  # released
        pass
