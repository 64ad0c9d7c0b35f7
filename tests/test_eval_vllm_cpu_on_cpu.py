"""``fgrpo-verl eval --backend vllm`` with the real engine, on vLLM's CPU build (the GPU path's code, run here).

Two tiny random-weight models in the paper's two chat-template families: Llama-3 style (a BOS written by the
template *and* added by the tokenizer to text) and Qwen (no BOS), evaluated by one command (one engine after the
other in one process, as an evaluation job does for a pass's checkpoints). In that same process, once the command
has returned, a probe takes the engine the command built for the Llama model (the last one) and asks vLLM for its
own rendering of that model's text: each vLLM engine on CPU costs tens of seconds to start, so the probe asks the
engine the evaluation already built. What is checked against vLLM itself:

- the prompt vLLM samples from is exactly the token ids evaluation built (one BOS), where vLLM would give a
  rendered text prompt two; ``VLLMSampler`` refuses to continue when vLLM's prompt differs from the ids;
- per-request seeds reproduce: the same seed gives the same samples in a new engine, another seed other samples;
- an evaluation killed (SIGKILL) mid-benchmark and run again with ``--resume`` ends with the same completions and
  tables as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evaluation_tiny_lm import BOS, CHAT_TEMPLATE, LLAMA_TEMPLATE, build_chat_lm, chat_tokenizer
from fgrpo_verl.evaluation.formats import read_generations

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
N_PROBLEMS = 24
TABLES = ("pass_at_k.md", "pass_at_k_long.csv", "pass_at_k_table.csv")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The two tiny models and the benchmark, built once."""
    return _build(tmp_path_factory.mktemp("eval_vllm"))


def _build(root: Path) -> dict:
    llama = build_chat_lm(root / "llama", chat_tokenizer(LLAMA_TEMPLATE, with_bos=True), arch="llama")
    qwen = build_chat_lm(root / "qwen", chat_tokenizer(CHAT_TEMPLATE, with_bos=False), arch="qwen2")
    bench = root / "B.jsonl"
    bench.write_text("".join(json.dumps({"id": i, "problem": f"What is {i} + 2?", "answer": str(i + 2)}) + "\n"
                             for i in range(N_PROBLEMS)))
    return {"root": root, "llama": llama, "qwen": qwen, "bench": bench}


def _eval_cmd(setup, out: Path, *models: str, extra=()) -> list[str]:
    cmd = [sys.executable, "-m", "fgrpo_verl", "eval", "--backend", "vllm", "--bench", f"B={setup['bench']}",
           "--n", "8", "--samples-per-request", "4", "--max-new-tokens", "24", "--max-model-len", "256",
           "--scorer", "boxed", "--out", str(out), "--no-plots", "--seed", "3", *extra]
    for name in models:
        cmd += ["--model", f"{name}={setup[name]}"]
    return cmd


def _env(base=None):
    return {**(os.environ if base is None else base), "PYTHONPATH": str(REPO)}


# The CLI's own entry point (what ``python -m fgrpo_verl`` runs), then VLLM_PROBE on the sampler the CLI built for
# the model at argv[1]: make_sampler is wrapped only to keep a reference to that sampler, so its engine outlives the
# pipeline's own ``del`` until the probe is done. That model goes last, so no other engine starts while it is held.
EVAL_THEN_PROBE = """
    import sys
    from pathlib import Path
    from fgrpo_verl.cli import main
    from fgrpo_verl.evaluation import generate

    probe_model = Path(sys.argv[1]).resolve()
    held = []
    real_make_sampler = generate.make_sampler

    def make_sampler(backend, model_path, args):
        sampler = real_make_sampler(backend, model_path, args)
        if Path(model_path).resolve() == probe_model:
            held.append(sampler)
        return sampler

    generate.make_sampler = make_sampler
    rc = main(sys.argv[2:])
    print("EVAL_RC", rc, flush=True)
    if rc != 0:
        sys.exit(rc)
    [sampler] = held
"""


@pytest.fixture(scope="module")
def full(setup):
    """One uninterrupted evaluation of both models (shared, read-only): the second engine starts in the same process
    after the first is released; then VLLM_PROBE on the Llama engine: (output dir, the process's whole log, the
    probe's RESULT)."""
    out = setup["root"] / "full"
    eval_argv = _eval_cmd(setup, out, "qwen", "llama")[3:]  # after `python -m fgrpo_verl`
    script = textwrap.dedent(EVAL_THEN_PROBE) + textwrap.dedent(VLLM_PROBE)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", script, str(setup["llama"]), *eval_argv], env=_env(),
                         capture_output=True, text=True, timeout=900)
    print(f"[eval vllm e2e] 2 models x {N_PROBLEMS} problems x n=8, then the probe: {time.monotonic() - start:.1f}s")
    assert "EVAL_RC 0" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.returncode == 0, "the probe failed: " + run.stdout[-3000:] + run.stderr[-3000:]
    got = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    return out, run.stdout + run.stderr, got


def test_eval_samples_from_the_exact_prompt_ids_with_both_chat_templates(full):
    """Every request went through VLLMSampler's check that vLLM's prompt equals the ids it was given."""
    out, log, _ = full
    gens = read_generations(out / "generations.jsonl")
    assert sorted({g.run for g in gens}) == ["llama", "qwen"]
    assert all(len(g.completions) == 8 for g in gens) and len(gens) == 2 * N_PROBLEMS
    llama_prompt = next(g.prompt for g in gens if g.run == "llama")
    assert llama_prompt.startswith(BOS) and llama_prompt.count(BOS) == 1
    assert all(BOS not in g.prompt for g in gens if g.run == "qwen")  # the Qwen family writes no BOS
    assert "vLLM changed a prompt" not in log
    assert (out / "pass_at_k.md").is_file()


# on ``sampler``, the CLI's VLLMSampler of the Llama model
VLLM_PROBE = """
    import json
    from fgrpo_verl.evaluation.generate import Request
    from fgrpo_verl.evaluation.prompts import encode_prompt, prompt_setting
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    tok = sampler.tokenizer
    ids, text = encode_prompt({"id": "0", "problem": "What is 0 + 2?"}, tok, prompt_setting("qwen2.5-7b", "math"))
    params = lambda seed: SamplingParams(n=4, temperature=1.0, max_tokens=24, seed=seed)
    by_ids = sampler.llm.generate([TokensPrompt(prompt_token_ids=ids)], [params(3)], use_tqdm=False)[0]
    by_text = sampler.llm.generate([text], [params(3)], use_tqdm=False)[0]
    same = sampler.sample([Request(ids, 4, 3), Request(ids, 4, 3), Request(ids, 4, 4)], 1.0, 1.0, 24)
    try:
        sampler.sample([Request(ids[1:], 4, 3)], 1.0, 1.0, 24)  # ids without their BOS: vLLM must not add it
        refused = "no"
    except RuntimeError as err:
        refused = str(err)
    print("RESULT", json.dumps({"bos": tok.bos_token_id, "ids": ids, "text": text,
                      "vllm_ids": list(by_ids.prompt_token_ids),
                      "vllm_text_ids": list(by_text.prompt_token_ids), "same": same, "refused": refused}),
          flush=True)
"""


def test_vllm_adds_a_second_bos_to_text_but_samples_token_ids_as_given_and_seeds_reproduce(full):
    """The Llama template, on the CLI's prompt encoding (its default preset and group) and its sampler."""
    _, log, got = full
    bos = got["bos"]
    # the prompt evaluation writes for this problem: the template's BOS, once
    assert got["text"].startswith(BOS) and got["text"].count(BOS) == 1
    assert "vLLM changed a prompt" not in log
    assert got["ids"][0] == bos and got["ids"].count(bos) == 1
    assert got["vllm_ids"] == got["ids"]  # token ids: sampled from exactly these
    assert got["vllm_text_ids"][:2] == [bos, bos]  # the pitfall: the rendered text gets vLLM's own BOS in front
    first, again, other = got["same"]
    assert first == again and first != other  # per-request seeds: same seed, same samples; another seed, others
    assert got["refused"] == "no"  # vLLM keeps a prompt without BOS as it is (nothing is added to token ids)


def _lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.is_file() else 0


def test_a_killed_eval_resumes_to_the_same_completions_and_tables(setup, full):
    out = setup["root"] / "killed"
    cmd = _eval_cmd(setup, out, "qwen", extra=["--problems-per-call", "1"])
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    gen = out / "generations.jsonl"
    deadline = time.monotonic() + 600
    try:
        while _lines(gen) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the evaluation ended before it could be killed: " + proc.stderr.read()[-2000:]
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and vLLM's engine processes
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done_before = {g.problem_id for g in read_generations(gen) if g.completions is not None}
    assert 0 < len(done_before) < N_PROBLEMS
    resumed = subprocess.run([*cmd, "--resume"], env=_env(), capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"{N_PROBLEMS - len(done_before)} of {N_PROBLEMS} problems" in resumed.stdout + resumed.stderr

    def completions(path, run):
        return {g.problem_id: g.completions for g in read_generations(path) if g.run == run and g.completions}

    assert completions(gen, "qwen") == completions(full[0] / "generations.jsonl", "qwen")
    # the uninterrupted run's tables hold both models; the resumed one's table is its qwen column
    table = (out / "pass_at_k_long.csv").read_text().splitlines()
    full_rows = [row for row in (full[0] / "pass_at_k_long.csv").read_text().splitlines() if "qwen" in row]
    assert table[1:] == full_rows
