"""The preflight's memory estimate (fgrpo_verl/preflight/memory.py): a warning per phase of a step, with the setting
that would make the phase fit, and a refusal only where ``FGRPO_PREFLIGHT_MEMORY=refuse`` asks for one. Its terms
are pinned to verl's code where that runs on a CPU: the states each phase holds (verl's engine context switch), the
dtype of AdamW's moments (torch), the LM head's arrays (verl's fused kernel and its entropy over logits, measured),
how dynamic batch sizes pack a micro-batch (verl's ``prepare_micro_batches``). The certain memory rules (vLLM's
start, its KV cache, the update's states): tests/test_preflight_on_cpu.py."""

from __future__ import annotations

import itertools

import pytest

from fgrpo_verl import preflight
from fgrpo_verl.cli import main as cli_main
from fgrpo_verl.launch import plan_jobs
from fgrpo_verl.preflight import memory, rules
from preflight_cases import (GIB, REFUSE, SEVEN_B, STRICT, WARNED, compose, phases, refused, run, verl_micro_batches,
                             verl_module, warnings)

LLAMA_1X1 = ["algo=grpo", "base_model=llama32_3b_instruct", "dataset=deepscaler", "cluster=1x1",
             "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
             "actor_rollout_ref.actor.fsdp_config.param_offload=true",
             "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true"]
LOG_PROB_MICRO = "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"
UPDATE_MICRO = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
FSDP_SIZE = "actor_rollout_ref.actor.fsdp_config.fsdp_size"


def _fix(warning: str) -> int:
    """The value a warning's "lower it to N (X GiB)" offers."""
    return int(warning.split("lower it to ")[1].split(" ")[0])


def test_each_phase_holds_the_states_verls_context_switch_loads(monkeypatch):
    """verl's engine context (``BaseEngineCtx``) on a GPU: eval mode (the log-prob passes) loads offloaded parameters
    and leaves the optimizer where it is, train mode (the update) loads parameters, gradients and optimizer; what
    neither moves stays where offload put it. The estimate's states per phase are those, in fp32 bytes: parameters
    4, gradients 4 (only while training: verl frees them as each update ends), AdamW's moments 8."""
    base = verl_module("workers/engine/base.py")
    monkeypatch.setattr(base, "get_device_name", lambda: "cuda")
    for param_offload, optimizer_offload in itertools.product((False, True), repeat=2):
        loaded = {}

        class Engine:
            is_param_offload_enabled, is_optimizer_offload_enabled, mode = param_offload, optimizer_offload, None

            def to(self, device, model=True, optimizer=True, grad=True):
                if device == "cuda":
                    loaded.update(model=model, optimizer=optimizer, grad=grad)

        config = compose([*SEVEN_B, f"actor_rollout_ref.actor.fsdp_config.param_offload={param_offload}",
                          f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={optimizer_offload}"])
        counted = memory.states(config, 1.0, 1)
        for mode, phase in (("eval", "log-prob"), ("train", "update")):
            loaded.clear()
            with base.BaseEngineCtx(Engine(), mode):
                on_gpu = 4 * (not param_offload or loaded.get("model", False)) \
                    + 8 * (not optimizer_offload or loaded.get("optimizer", False)) + 4 * (mode == "train")
            assert counted[phase] == on_gpu, (param_offload, optimizer_offload, mode, loaded)
        # between passes (the rollout from the second step): what offload moved to the host stays there
        assert counted["rollout"] == 4 * (not param_offload) + 8 * (not optimizer_offload)


def test_the_moments_take_the_parameters_dtype_and_lora_freezes_the_base(tmp_path):
    """torch's AdamW keeps its moments in the parameters' dtype, so fsdp_config.model_dtype=bf16 halves every state;
    LoRA's frozen base weights have no gradients or moments. Qwen2.5-7B on 2 GPUs: fp32 warns about the rollout
    (42.6 GiB of parameters and moments beside vLLM's share) and the update; bf16 and LoRA fit."""
    import torch

    weight = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
    optimizer = torch.optim.AdamW([weight])
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    assert {optimizer.state[weight][m].dtype for m in ("exp_avg", "exp_avg_sq")} == {torch.bfloat16}
    two = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=1x8", "trainer.n_gpus_per_node=2",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    found = warnings(run(two, tmp_path))
    assert any("the rollout phase needs" in w and "(42.6 GiB of FSDP states" in w for w in found), found
    for extra in ("actor_rollout_ref.actor.fsdp_config.model_dtype=bf16", "actor_rollout_ref.model.lora_rank=32"):
        assert not warnings(run([*two, extra], tmp_path)), extra


def test_a_log_prob_pass_holds_parameters_and_logits_not_gradients_or_moments(tmp_path):
    """Llama-3.2-3B on one H100 with param and optimizer offload and 16 full-length samples per log-prob
    micro-batch: verl's eval mode loads the fp32 parameters (12.0 GiB), no gradients, no moments (offloaded), beside
    the micro-batch's bf16 logits (16 x 9,216 tokens x 128,256 x 2 B = 35.2 GiB): about 50 GiB, and the run passes
    without a warning. 64 per micro-batch warns, naming the micro-batch that fits (16), not more GPUs; with
    FGRPO_PREFLIGHT_MEMORY=refuse the same line refuses."""
    report = run([*LLAMA_1X1, f"{LOG_PROB_MICRO}=16"], tmp_path)
    params_and_logits = (3.21e9 * 4 + 16 * 9216 * 128256 * 2) / GIB
    assert params_and_logits < phases(report)["log-prob"] < params_and_logits + 3, phases(report)
    assert not warnings(report)
    (warning,) = warnings(run([*LLAMA_1X1, f"{LOG_PROB_MICRO}=64"], tmp_path))
    assert warning.startswith(f"warning: {LOG_PROB_MICRO}=64: the log-prob phase needs") and "GPUs" not in warning
    assert _fix(warning) == 16, warning
    (line,) = refused([*LLAMA_1X1, f"{LOG_PROB_MICRO}=64"], tmp_path, env=REFUSE)
    assert line == warning.removeprefix("warning: ").replace(WARNED, STRICT)


def test_an_update_over_the_gpu_warns_with_a_micro_batch_that_fits(tmp_path):
    """Qwen2.5-7B on 24 GiB GPUs: the update's micro-batch of 4 full-length samples is over the estimate; the
    warning offers the largest micro-batch (a divisor of the GPU's share) that fits, which passes without one."""
    small = [*SEVEN_B, "slurm.gpu_memory_gib=24"]
    (warning,) = warnings(run(small, tmp_path))
    assert warning.startswith(f"warning: {UPDATE_MICRO}=4: the update phase needs") and "> 24.0 GiB" in warning
    assert not warnings(run([*small, f"{UPDATE_MICRO}={_fix(warning)}"], tmp_path))


def test_the_rollout_warns_with_a_share_of_vllm_that_fits(tmp_path):
    """From the second step vLLM's KV cache wakes beside the actor's parameters and moments: at u = 0.95 that is
    over an H100 (an estimate: a warning, not a refusal), with the share that fits, or optimizer offload."""
    util = "actor_rollout_ref.rollout.gpu_memory_utilization"
    (warning,) = warnings(run([*SEVEN_B, f"{util}=0.95"], tmp_path))
    assert warning.startswith(f"warning: {util}=0.95: the rollout phase needs") and \
        warning.endswith(f"or set actor_rollout_ref.actor.fsdp_config.optimizer_offload=true (and param_offload) "
                         f"{WARNED}")
    share = warning.split("lower it to ")[1].split(",")[0]
    assert not warnings(run([*SEVEN_B, f"{util}={share}"], tmp_path))


def test_no_share_below_what_vllms_kv_cache_needs_is_offered(tmp_path):
    """Qwen2.5-7B in bf16 on two 32 GiB GPUs, max_model_len 9,216: the rollout's 21.3 GiB of parameters and moments
    beside vLLM's u = 0.5 is over the GPU, and the share that would fit beside them (0.31) cannot hold vLLM's 14.2
    GiB of weights and one sequence's KV cache (vLLM needs 0.46): no share is offered, offload or more GPUs are; the
    KV-cache rule refuses the share that fits beside them."""
    util = "actor_rollout_ref.rollout.gpu_memory_utilization"
    two = ["algo=grpo", "base_model=qwen25_7b", "dataset=deepscaler", "cluster=1x8", "trainer.n_gpus_per_node=2",
           "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "slurm.gpu_memory_gib=32",
           "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16", "actor_rollout_ref.rollout.max_model_len=9216"]
    (warning,) = [w for w in warnings(run([*two, f"{util}=0.5"], tmp_path)) if "the rollout phase" in w]
    assert "lower it" not in warning and warning.endswith("set actor_rollout_ref.actor.fsdp_config.optimizer_offload"
                                                          f"=true (and param_offload), or use more GPUs {WARNED}")
    assert any(line.startswith(f"{util}=0.31: vLLM's KV cache") for line in refused([*two, f"{util}=0.31"], tmp_path))
    run([*two, f"{util}=0.46"], tmp_path)
    # vLLM's start beside one GPU's fp32 parameters (28.4 GiB): the same, a certain rule
    start = [line for line in refused([*two, "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
                                       "trainer.n_gpus_per_node=1", f"{util}=0.5"], tmp_path) if "vLLM starts" in line]
    assert start and start[0].endswith("; set actor_rollout_ref.actor.fsdp_config.param_offload=true, or use more GPUs")


def test_the_actors_states_shard_over_fsdp_size_as_verls_device_mesh(tmp_path, monkeypatch):
    """verl's create_device_mesh: an fsdp_size between 0 and the GPUs makes a (GPUs / fsdp_size, fsdp_size) mesh
    (FSDP shards over the last dimension, replicated over the first), -1 or the GPUs or more one dimension of all:
    the estimate shards over its last dimension. Qwen2.5-7B on 2 x 8: fsdp_size=4 leaves each GPU 4x the states of
    all 16 (the update's 16 B per parameter: 7.1 -> 28.4 GiB) and warns nothing; 1 leaves the whole 113.5 GiB, over
    the GPU: the certain rule refuses it naming fsdp_size."""
    mesh = verl_module("workers/engine/fsdp/utils.py")
    monkeypatch.setattr(mesh, "get_device_name", lambda: "cuda")
    monkeypatch.setattr(mesh, "init_device_mesh", lambda device, mesh_shape, mesh_dim_names: mesh_shape)
    for world, size in itertools.product((1, 8, 16), (-1, 1, 2, 4, 8, 16, 32)):
        config = compose([*SEVEN_B, f"{FSDP_SIZE}={size}"])
        assert memory.shards(config, world) == mesh.create_device_mesh(world, size)[-1], (world, size)
    full, quarter = (run([*SEVEN_B, *extra], tmp_path) for extra in ([], [f"{FSDP_SIZE}=4"]))
    assert not warnings(quarter) and phases(quarter)["update"] - phases(full)["update"] == pytest.approx(21.3, abs=0.1)
    (line,) = refused([*SEVEN_B, f"{FSDP_SIZE}=1"], tmp_path)
    assert line.startswith(f"{FSDP_SIZE}=1: the update holds 113.5 GiB per GPU") and "raise it (-1: all 16 GPUs)" \
        in line and "more GPUs" not in line  # more GPUs only add replicas of a group of fsdp_size
    # a size whose mesh does not cover the 16 GPUs (verl divides by 0; 6 makes a 2 x 6 mesh of 12) is refused
    with pytest.raises(ZeroDivisionError):
        mesh.create_device_mesh(16, 0)
    assert mesh.create_device_mesh(16, 6) == (2, 6)
    for size, read in ((0, 0), (6, 6), ("null", None)):  # null: verl's `fsdp_size < 0` is a TypeError
        (line,) = refused([*SEVEN_B, f"{FSDP_SIZE}={size}"], tmp_path)
        assert line == (f"{FSDP_SIZE}={read}: verl's device mesh of (GPUs // fsdp_size, fsdp_size) does not cover "
                        "the 16 GPUs; use -1 (all) or one of [1, 2, 4, 8]")


@pytest.mark.parametrize("lengths, budget, sp", [([512] * 64, 8192, 2), ([1000] * 10, 3000, 1), ([1000] * 2, 3000, 1)])
def test_dynamic_batch_sizes_count_a_micro_batch_packed_as_verl_packs_it(lengths, budget, sp):
    """verl packs a micro-batch up to budget x SP tokens, at most the GPU's samples, and Ulysses gives each GPU 1/SP
    of them: the estimate's micro-batch of sequences that fill it is verl's largest."""
    packed = memory.Pass("update", "k", budget, True, len(lengths), sp)
    assert packed.tokens(budget, lengths[0]) == max(verl_micro_batches(lengths, budget=budget, sp=sp)) // sp


def test_a_token_budget_over_the_gpu_warns_with_one_that_fits(tmp_path):
    budget = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"
    dynamic = [*SEVEN_B, "actor_rollout_ref.actor.use_dynamic_bsz=true"]
    (warning,) = warnings(run([*dynamic, f"{budget}=150000"], tmp_path))
    assert warning.startswith(f"warning: {budget}=150000: the update phase needs") and "packed to its token budget" \
        in warning
    assert not warnings(run([*dynamic, f"{budget}={_fix(warning)}"], tmp_path))
    assert warnings(run([*dynamic, f"{budget}={_fix(warning) + 1}"], tmp_path))  # the largest that fits


def _peak_bytes(fn) -> int:
    """The most CPU memory ``fn`` holds at once beyond what existed before it, from torch's memory profiler (every
    allocation and free of the CPU allocator, in order)."""
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action, MemoryProfile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        fn()
    held = peak = 0
    for _, action, _, size in MemoryProfile(prof.profiler.kineto_results).timeline:
        held += size if action == Action.CREATE else -size if action == Action.DESTROY else 0
        peak = max(peak, held)
    return peak


def test_verls_fused_torch_kernel_holds_what_the_estimate_counts(tmp_path):
    """verl's FusedLinearForPPO (the torch backend, and liger where liger-kernel is not installed: verl falls back to
    the torch kernel) on CPU in bf16, 4 chunks of 512 tokens, a small vocabulary and hidden size (so that the chunk's
    arrays dominate): its peak is the estimate's chunk term, 12 / 20 / 28 B per chunk x V element (log-probs, update,
    update with the entropy in the loss), to within 1 %."""
    import torch
    from verl.utils.experimental import torch_functional

    tokens, hidden, vocab = 4 * memory.FUSED_CHUNK, 8, 4096
    torch.manual_seed(0)
    states = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    weights = torch.randn(vocab, hidden, dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (tokens,))

    def infer(backend):
        with torch.no_grad():
            torch_functional.FusedLinearForPPO(impl_backend=backend).forward(states, weights, labels)

    def train(backend, entropy):
        h, w = states.detach().requires_grad_(True), weights.detach().requires_grad_(True)
        log_probs, entropies = torch_functional.FusedLinearForPPO(impl_backend=backend).forward(h, w, labels)
        (log_probs.sum() + (0.0 * entropies.sum() if entropy else 0.0)).backward()  # verl: - entropy_coeff x entropy

    backends = ["torch"]
    if not rules.liger_installed():
        backends.append("liger")  # runs the torch kernel
        liger = compose([*SEVEN_B, "actor_rollout_ref.model.use_fused_kernels=true",
                         "actor_rollout_ref.model.fused_kernel_options.impl_backend=liger"])
        assert rules.Run(liger, tmp_path, {}).head == "torch"
    for backend in backends:
        for measured, (train_pass, entropy) in ((_peak_bytes(lambda: infer(backend)), (False, False)),
                                                (_peak_bytes(lambda: train(backend, False)), (True, False)),
                                                (_peak_bytes(lambda: train(backend, True)), (True, True))):
            counted = memory.head_bytes("torch", tokens, vocab, train_pass, entropy)
            assert counted <= measured <= 1.01 * counted, (backend, train_pass, entropy, measured / counted)
    # the chunk term does not grow with the micro-batch: 512 tokens at a time
    assert memory.head_bytes("torch", 100_000, vocab, True) == memory.head_bytes("torch", 512, vocab, True)


def test_verls_eager_entropy_over_logits_holds_what_the_estimate_counts():
    """The actor's log-prob pass computes the entropy over the materialized logits (v1 _compute_old_log_prob); without
    torch.compile verl's entropy_from_logits holds a softmax and one temporary of the logits' size beside them, as
    counted, to within 1 %; its log-probs (the row-wise fallback) add nothing of that size."""
    import torch
    from verl.utils import torch_functional as verl_f

    tokens, vocab = 2048, 4096
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16)
    with torch.no_grad():
        measured = _peak_bytes(lambda: verl_f.entropy_from_logits(logits))
        log_probs = _peak_bytes(lambda: verl_f.logprobs_from_logits(logits, torch.randint(0, vocab, (tokens,))))
    counted = memory.head_bytes("logits", tokens, vocab, False, True, True) - memory.head_bytes("logits", tokens,
                                                                                                vocab, False)
    assert counted <= measured <= 1.01 * counted and log_probs < 0.01 * counted, (measured / counted, log_probs)


def test_fused_kernels_fit_where_materialized_logits_warn(tmp_path):
    """Qwen2.5-7B on an A100 40GB (39.4 GiB as torch reports it): the update's bf16 logits of 4 x 9,216 tokens (and
    their gradient, 20.9 GiB) are over the estimate, and the warning names fused kernels as a fix; verl's fused
    kernels never hold them (torch: 512-token chunks; triton: a d_logits of 9,504 columns per token): both fit."""
    small = [*SEVEN_B, "slurm.gpu_memory_gib=39.4"]
    (warning,) = warnings(run(small, tmp_path))
    assert ", or set actor_rollout_ref.model.use_fused_kernels=true" in warning
    for backend in ("torch", "triton"):
        assert not warnings(run([*small, "actor_rollout_ref.model.use_fused_kernels=true",
                                 f"actor_rollout_ref.model.fused_kernel_options.impl_backend={backend}"], tmp_path))


def test_the_reference_pass_is_counted_where_its_worker_runs(tmp_path):
    """use_kl_loss without LoRA: a reference worker runs its own log-prob pass, with the ref block's micro-batch (all
    128 samples of a GPU at once warns, naming that key); with LoRA the actor computes it and no reference phase is
    counted."""
    kl = [*SEVEN_B, "actor_rollout_ref.actor.use_kl_loss=true",
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=128"]
    (warning,) = warnings(run(kl, tmp_path))
    assert warning.startswith("warning: actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=128: the reference "
                              "phase needs"), warning
    assert "reference" not in phases(run([*kl, "actor_rollout_ref.model.lora_rank=32"], tmp_path))


def test_the_estimate_warns_unless_the_site_asks_it_to_refuse(tmp_path, monkeypatch):
    """FGRPO_PREFLIGHT_MEMORY in the job's environment (this process's, a recipe's env:, the launcher's check_run):
    unset, blank or warn, the estimate warns and the run passes; refuse refuses it; any other value is refused in
    one line naming the variable and its values."""
    over = [*SEVEN_B, "slurm.gpu_memory_gib=24"]
    for value in (None, "", " ", "warn"):
        assert warnings(run(over, tmp_path, env={} if value is None else {"FGRPO_PREFLIGHT_MEMORY": value}))
    (line,) = refused(over, tmp_path, env=REFUSE)
    assert line.startswith(f"{UPDATE_MICRO}=4: the update phase needs") and line.endswith(STRICT)
    (line,) = refused(SEVEN_B, tmp_path, env={"FGRPO_PREFLIGHT_MEMORY": "yes"})
    assert line == ("FGRPO_PREFLIGHT_MEMORY='yes': not one of its values (warn, refuse, or unset); unset it (the "
                    "memory estimate warns), or set FGRPO_PREFLIGHT_MEMORY=refuse to refuse a run over it")
    with pytest.raises(preflight.PreflightError) as refusal:
        preflight.check_run(compose(over), str(tmp_path), env=REFUSE)
    assert str(refusal.value).endswith(STRICT)
    monkeypatch.setenv("FGRPO_PREFLIGHT_MEMORY", "refuse")
    refused(over, tmp_path)
    monkeypatch.delenv("FGRPO_PREFLIGHT_MEMORY")
    # a recipe's env: as fgrpo-verl launch plans it (the preflight given the recipe's env:)
    recipe = tmp_path / "tight.yaml"
    body = ("name: tight\nproject: fgrpo-tight\n{env}common: [algo=grpo, base_model=qwen25_7b, dataset=deepscaler, "
            "cluster=2x8, slurm.gpu_memory_gib=24]\nruns:\n  - {{name: r, overrides: []}}\n")
    recipe.write_text(body.format(env=""))
    (job,) = plan_jobs(str(recipe), None, [], tmp_path / "logs", tmp_path)[1]
    assert f"warning: {UPDATE_MICRO}=4: the update phase needs" in job.preflight
    recipe.write_text(body.format(env="env: {FGRPO_PREFLIGHT_MEMORY: refuse}\n"))
    with pytest.raises(ValueError) as err:
        plan_jobs(str(recipe), None, [], tmp_path / "logs", tmp_path)
    assert str(err.value).startswith(f"recipe tight, run r: {UPDATE_MICRO}=4: ") and str(err.value).endswith(STRICT)


@pytest.mark.parametrize("certain", [
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",  # mini-batch divisibility
    "actor_rollout_ref.rollout.tensor_model_parallel_size=3",  # TP x DP x PP vs the GPUs
    "actor_rollout_ref.rollout.tensor_model_parallel_size=16",  # attention heads vs TP
    "transfer_queue.backend.SimpleStorage.total_storage_size=1000",  # TransferQueue capacity
])
def test_a_certain_rule_refuses_whatever_the_estimate_says(tmp_path, certain):
    """A run over the estimate that also breaks a certain rule: refused for the certain rule alone by default (its
    line names no estimate), and for both with FGRPO_PREFLIGHT_MEMORY=refuse."""
    both = [*SEVEN_B, "slurm.gpu_memory_gib=24", certain]
    lines = refused(both, tmp_path)
    assert lines and not any(line.endswith(STRICT) for line in lines), lines
    strict = refused(both, tmp_path, env=REFUSE)
    assert [line for line in strict if not line.endswith(STRICT)] == lines and len(strict) > len(lines), strict


def test_the_dry_run_passes_a_run_over_the_estimate_with_its_warning_and_refuses_a_certain_rule(
        tmp_path, monkeypatch, capsys):
    """``launch R --dry-run`` on both sides: over the estimate alone, the plan is printed (exit 3: no data here)
    with the warning in the run's preflight; a certain rule refuses (exit 2) in one line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    body = ("name: tight\nproject: fgrpo-tight\ncommon: [algo=grpo, base_model=qwen25_7b, dataset=deepscaler, "
            "cluster=2x8, slurm.gpu_memory_gib=24{extra}]\nruns:\n  - {{name: r, overrides: []}}\n")
    (tmp_path / "tight.yaml").write_text(body.format(extra=""))
    assert cli_main(["launch", str(tmp_path / "tight.yaml"), "--dry-run"]) == 3
    out = capsys.readouterr().out
    assert f"warning: {UPDATE_MICRO}=4: the update phase needs" in out and "memory per GPU (estimate): " in out
    (tmp_path / "tight.yaml").write_text(body.format(extra=", actor_rollout_ref.actor.ppo_mini_batch_size=1"))
    assert cli_main(["launch", str(tmp_path / "tight.yaml"), "--dry-run"]) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fgrpo-verl launch: error:")]
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=1: a mini-batch of 1 prompts" in error
