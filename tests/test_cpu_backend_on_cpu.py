"""CPU backend pieces: backend selection, platform registration, gloo process groups, sampling log-probs,
the rollout server's contract, and the backend config group."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import side_by_side
import torch

REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- selection: GPU runs never import the backend
def _python_run(code: str, **env) -> dict:
    """``subprocess.run`` arguments for a fresh interpreter running ``code`` (``None`` unsets a variable)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    return {"args": [sys.executable, "-c", code], "env": full_env, "timeout": 600}


PROBE = (
    "import sys, verl\n"
    "from verl.plugin.platform import platform_manager, PlatformRegistry\n"
    "frozen = platform_manager._current_platform is not None\n"
    "from verl.workers.rollout.base import _ROLLOUT_REGISTRY\n"
    "import verl.utils.distributed as dist\n"
    "print('cpu_module', 'fgrpo_verl.backends.cpu' in sys.modules)\n"
    "print('platform', 'cpu' in PlatformRegistry.registered_names())\n"
    "print('rollout', ('hf', 'async') in _ROLLOUT_REGISTRY)\n"
    "print('patched', dist.initialize_global_process_group_ray.__module__.startswith('fgrpo_verl'))\n"
    "print('frozen_by_import', frozen)\n"
)
# VERL_USE_EXTERNAL_PLUGINS=none: verl's loader alone, without fgrpo-verl's entry point (whose import policy is
# tested elsewhere), must register the backend
_CLEAN = {"VERL_USE_EXTERNAL_MODULES": None, "VERL_PLATFORM": None, "VERL_USE_EXTERNAL_PLUGINS": "none"}


def _free_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


GLOO = (
    "import verl, torch, torch.distributed as dist\n"
    "from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device, get_resource_name\n"
    "from verl.utils.distributed import initialize_global_process_group_ray\n"
    "from fgrpo_verl.backends.cpu import verl_patches\n"
    "print(get_device_name(), get_nccl_backend(), get_resource_name())\n"
    "m = get_torch_device(); m.empty_cache(); m.synchronize(); free, total = m.mem_get_info()\n"
    "assert 0 < free <= total\n"
    "assert torch.ones(2).to(m.current_device()).device.type == 'cpu'\n"
    "try:\n"
    "    verl_patches.ORIGINALS['initialize_global_process_group_ray']()\n"
    "except ValueError as e:\n"
    "    print('verl string rejected', 'Duplicate device type cpu' in str(e))\n"
    "initialize_global_process_group_ray()\n"
    "print('backend', dist.get_backend())\n"
    "x = torch.tensor([3.0]); dist.all_reduce(x); print('sum', float(x))\n"
    "dist.destroy_process_group()\n"
)
REPLAY = (
    "import sys, verl\n"
    "assert 'verl.trainer.ppo.v1.replay_buffer' not in sys.modules\n"
    "from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer\n"
    "from verl.utils.device import get_device_name\n"
    "args = dict(trainer_mode='sync', trainer_config={}, max_off_policy_threshold=None,\n"
    "            max_off_policy_strategy='drop', sampler_kwargs={})\n"
    "print(get_device_name(), ReplayBuffer(**args).poll_interval, ReplayBuffer(**args, poll_interval=1.5).poll_interval)\n"
)


@pytest.fixture(scope="module")
def fresh(request):
    """The fresh interpreters this module asserts on, one per environment (each imports verl anew: which backend
    a process loads is decided at its ``import verl``), started together when the first test needs one."""
    cpu = {**_CLEAN, "VERL_USE_EXTERNAL_MODULES": "fgrpo_verl.backends.cpu"}
    started = side_by_side.start(side_by_side.selected(request, {
        "probe-none": ("test_plain_import_of_verl_does_not_load_any_backend",
                       _python_run(PROBE, **{**_CLEAN, "VERL_USE_EXTERNAL_PLUGINS": "none"})),
        "probe-auto": ("test_plain_import_of_verl_does_not_load_any_backend",
                       _python_run(PROBE, **{**_CLEAN, "VERL_USE_EXTERNAL_PLUGINS": "auto"})),
        "probe-cpu": ("test_verl_external_modules_loads_the_cpu_backend", _python_run(PROBE, **cpu)),
        "probe-gpu_hf": ("test_gpu_hf_backend_installs_the_rollout_and_no_cpu_code",
                         _python_run(PROBE, **{**_CLEAN, "VERL_USE_EXTERNAL_MODULES": "fgrpo_verl.backends.gpu_hf"})),
        "misspelt": ("test_a_misspelt_backend_module_fails_import_verl_loudly",
                     _python_run("import verl", **{**_CLEAN, "VERL_USE_EXTERNAL_MODULES": "fgrpo_verl.backends.cpuu"})),
        "gloo": ("test_cpu_platform_resolves_and_gloo_process_group_initialises",
                 _python_run(GLOO, VERL_USE_EXTERNAL_MODULES="fgrpo_verl.backends.cpu", VERL_PLATFORM="cpu", RANK="0",
                             WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port())),
        "replay-cpu": ("test_replay_buffer_polls_fast_on_the_cpu_platform_only",
                       _python_run(REPLAY, **{**cpu, "VERL_PLATFORM": "cpu"})),
        "replay-nvidia": ("test_replay_buffer_polls_fast_on_the_cpu_platform_only",
                          _python_run(REPLAY, **{**cpu, "VERL_PLATFORM": "nvidia"})),
    }))
    yield started
    started.close()


@pytest.mark.parametrize("plugins", ["none", "auto"])
def test_plain_import_of_verl_does_not_load_any_backend(plugins, fresh):
    """Also with fgrpo-verl's entry point loaded (``auto``)."""
    out = fresh.result(f"probe-{plugins}")
    assert out.returncode == 0, out.stderr
    assert "cpu_module False" in out.stdout and "platform False" in out.stdout and "rollout False" in out.stdout
    assert "patched False" in out.stdout


def test_verl_external_modules_loads_the_cpu_backend(fresh):
    out = fresh.result("probe-cpu")
    assert out.returncode == 0, out.stderr
    assert "cpu_module True" in out.stdout and "platform True" in out.stdout and "rollout True" in out.stdout
    assert "patched True" in out.stdout
    # loading the backend must not resolve verl's platform: VERL_PLATFORM / detection decide later
    assert "frozen_by_import False" in out.stdout


def test_gpu_hf_backend_installs_the_rollout_and_no_cpu_code(fresh):
    """GPU nodes (backend=gpu_hf) get the hf rollout only: no cpu platform, no wrapped verl function."""
    out = fresh.result("probe-gpu_hf")
    assert out.returncode == 0, out.stderr
    assert "rollout True" in out.stdout
    assert "cpu_module False" in out.stdout and "platform False" in out.stdout and "patched False" in out.stdout
    assert "frozen_by_import False" in out.stdout


def test_a_misspelt_backend_module_fails_import_verl_loudly(fresh):
    """verl's loader raises (unlike entry-point plugins, whose errors verl swallows)."""
    out = fresh.result("misspelt")
    assert out.returncode != 0
    assert "No module named 'fgrpo_verl.backends.cpuu'" in out.stderr


def test_selected_backends_names_the_valid_backend_modules(monkeypatch):
    from fgrpo_verl import backends

    monkeypatch.delenv(backends.EXTERNAL_MODULES_ENV, raising=False)
    assert backends.selected_backends() == []
    assert backends.selected_backends("fgrpo_verl.backends.cpu_vllm") == ["cpu_vllm"]
    # other teams' modules in the same variable are theirs: ignored here, imported by verl
    monkeypatch.setenv(backends.EXTERNAL_MODULES_ENV, " other_team.plugin , ")
    assert backends.selected_backends() == []
    monkeypatch.setenv(backends.EXTERNAL_MODULES_ENV, "other_team.plugin,fgrpo_verl.backends.tpu")
    with pytest.raises(ValueError, match=r"lists 'fgrpo_verl.backends.tpu', which is not a backend: valid modules "
                                         r"are fgrpo_verl.backends.cpu, fgrpo_verl.backends.cpu_vllm, fgrpo_verl.backends.gpu_hf"):
        backends.selected_backends()


# ---------------------------------------------------------------- platform + gloo process group
def test_cpu_platform_resolves_and_gloo_process_group_initialises(fresh):
    """verl's own backend string is rejected on the cpu platform (the wall); the wrapped init gives gloo."""
    out = fresh.result("gloo")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cpu gloo GPU" in out.stdout
    assert "verl string rejected True" in out.stdout
    assert "backend gloo" in out.stdout and "sum 3.0" in out.stdout


def test_replay_buffer_polls_fast_on_the_cpu_platform_only(fresh):
    """verl polls TransferQueue every 2 s for a step's rollouts; the cpu backend shortens the default only."""
    cpu = fresh.result("replay-cpu")
    assert cpu.returncode == 0, cpu.stderr[-3000:]
    assert cpu.stdout.split()[-3:] == ["cpu", "0.02", "1.5"]
    # backend loaded, but a GPU platform: verl's own default stays
    gpu = fresh.result("replay-nvidia")
    assert gpu.returncode == 0, gpu.stderr[-3000:]
    assert gpu.stdout.split()[-3:] == ["cuda", "2.0", "1.5"]


# ---------------------------------------------------------------- sampling
@pytest.fixture(scope="module")
def tiny_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=True, attn_implementation="eager")
    return Qwen2ForCausalLM(config).eval()


def _forward_log_probs(model, prompt, tokens, temperature):
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    t = temperature if temperature > 0 else 1.0
    return torch.log_softmax(logits / t, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def test_sampled_log_probs_match_a_full_forward_pass(tiny_model):
    from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams, sample_batch

    prompts = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13, 14, 15, 16, 17], [5]]
    params = [
        SamplingParams(1.0, 1.0, -1, 10, frozenset({1})),
        SamplingParams(0.7, 0.9, 5, 10, frozenset({1})),
        SamplingParams(0.0, 1.0, -1, 6, frozenset()),
        SamplingParams(1.3, 1.0, 3, 12, frozenset({1})),
    ]
    results = sample_batch(tiny_model, prompts, params, pad_token_id=0, generator=torch.Generator().manual_seed(0))
    for prompt, p, r in zip(prompts, params, results):
        assert 1 <= len(r.token_ids) <= p.max_tokens and len(r.log_probs) == len(r.token_ids)
        assert (r.finish_reason == "stop") == (r.token_ids[-1] in p.stop_token_ids)
        reference = _forward_log_probs(tiny_model, prompt, r.token_ids, p.temperature)
        assert torch.allclose(torch.tensor(r.log_probs), reference, atol=1e-5), (r.log_probs, reference)


def test_greedy_rows_pick_the_argmax_and_top_k_1_is_greedy(tiny_model):
    from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams, sample_batch

    prompt = [3, 4, 5]
    greedy = sample_batch(tiny_model, [prompt], [SamplingParams(0.0, 1.0, -1, 8, frozenset())], 0)[0]
    top1 = sample_batch(tiny_model, [prompt], [SamplingParams(1.0, 1.0, 1, 8, frozenset())], 0,
                        torch.Generator().manual_seed(1))[0]
    assert greedy.token_ids == top1.token_ids
    ids = list(prompt)
    for token in greedy.token_ids:  # each step is the argmax of a full forward pass
        with torch.no_grad():
            assert int(tiny_model(torch.tensor([ids])).logits[0, -1].argmax()) == token
        ids.append(token)


def test_top_p_and_top_k_restrict_the_sampled_support(tiny_model):
    from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams, _choose_tokens

    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0, -2.0]]).repeat(400, 1)
    gen = torch.Generator().manual_seed(0)
    top_k = _choose_tokens(logits, [SamplingParams(1.0, 1.0, 2, 1, frozenset())] * 400, gen)[0]
    assert set(top_k.tolist()) == {0, 1}
    # softmax mass of token 0 is ~0.70 < 0.8, so token 1 is kept and nothing else
    top_p = _choose_tokens(logits, [SamplingParams(1.0, 0.8, -1, 1, frozenset())] * 400, gen)[0]
    assert set(top_p.tolist()) == {0, 1}
    full = _choose_tokens(logits, [SamplingParams(1.0, 1.0, -1, 1, frozenset())] * 400, gen)[0]
    assert len(set(full.tolist())) >= 3


@pytest.mark.parametrize(
    "params, match",
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"repetition_penalty": 1.2}, "repetition_penalty"),
        ({"presence_penalty": 0.5}, "unsupported key"),
    ],
)
def test_bad_sampling_params_raise_naming_the_key(params, match):
    from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams

    with pytest.raises(ValueError, match=match):
        SamplingParams.from_request(params, default_max_tokens=4, eos_token_ids=frozenset({1}))


def test_ignore_eos_and_stop_token_ids():
    from fgrpo_verl.backends.hf_rollout.sampling import SamplingParams

    p = SamplingParams.from_request({"ignore_eos": True, "stop_token_ids": [7]}, 4, frozenset({1}))
    assert p.stop_token_ids == frozenset({7}) and p.max_tokens == 4
    q = SamplingParams.from_request({"max_tokens": 2}, 4, frozenset({1}))
    assert q.stop_token_ids == frozenset({1}) and q.max_tokens == 2


# ---------------------------------------------------------------- the server (in-process, no Ray)
@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    from omegaconf import OmegaConf

    from fgrpo_verl.backends.hf_rollout.server import HFRolloutServer
    from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    model_dir = tmp_path_factory.mktemp("srv_model")
    tiny_model.config.eos_token_id = tokenizer.eos_token_id
    tiny_model.config.pad_token_id = tokenizer.pad_token_id
    tiny_model.save_pretrained(model_dir)
    tokenizer_dir = tmp_path_factory.mktemp("srv_tok")
    tokenizer.save_pretrained(tokenizer_dir)
    rollout = OmegaConf.create({
        "_target_": "verl.workers.config.RolloutConfig", "name": "hf", "dtype": "float32",
        "prompt_length": 16, "response_length": 6, "max_num_seqs": 64, "tensor_model_parallel_size": 1,
    })
    model = OmegaConf.create({
        "path": str(model_dir), "tokenizer_path": str(tokenizer_dir),
        "override_config": {"attn_implementation": "eager"},
    })
    return HFRolloutServer(rollout, model, replica_rank=0, device="cpu")


def test_server_batches_concurrent_requests_and_reports_global_steps(server):
    async def go():
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
        outs = await asyncio.gather(*[server.generate([3, 4, 5 + i % 3], dict(params), f"r{i}") for i in range(8)])
        no_lp = await server.generate([3, 4], {**params, "logprobs": False}, "x")
        return outs, no_lp

    outs, no_lp = asyncio.run(go())
    for out in outs:
        assert 1 <= len(out.token_ids) <= 6 and len(out.log_probs) == len(out.token_ids)
        assert out.stop_reason == "completed" and out.extra_fields["global_steps"] == server.global_steps
    assert no_lp.log_probs is None


def test_server_samples_staggered_requests_as_one_batch(server, monkeypatch):
    """verl's agent loop sends one request per sample, a few ms apart: they must be sampled in one pass."""
    from fgrpo_verl.backends.hf_rollout import server as server_module

    batches = []
    real = server_module.sample_batch
    monkeypatch.setattr(server_module, "sample_batch", lambda model, prompts, *a: batches.append(len(prompts))
                        or real(model, prompts, *a))

    async def go():
        async def late(i):
            await asyncio.sleep(0.004 * i)  # arrivals spread over 44 ms, gaps well under the quiet window
            return await server.generate([3, 4, 5], {"temperature": 1.0}, f"s{i}")

        return await asyncio.gather(*[late(i) for i in range(12)])

    outs = asyncio.run(go())
    assert len(outs) == 12 and batches == [12]


def test_server_update_weights_loads_the_actor_state_and_rejects_foreign_names(server):
    new_state = {name: torch.randn_like(p) for name, p in server.model.named_parameters()}
    asyncio.run(server.update_weights(new_state, global_steps=7))
    for name, p in server.model.named_parameters():
        assert torch.equal(p.detach(), new_state[name])
    assert server.global_steps == 7
    with pytest.raises(ValueError, match="weights not in the rollout model"):
        asyncio.run(server.update_weights({"model.bogus.weight": torch.zeros(1)}))
    partial = dict(list(new_state.items())[1:])
    with pytest.raises(ValueError, match="actor sent no weights"):
        asyncio.run(server.update_weights(partial))


# ---------------------------------------------------------------- the config group
def test_backend_config_group_sets_cpu_knobs_and_gpu_is_the_default():
    from fgrpo_verl.config.compose import compose

    gpu = compose(["actor_rollout_ref.model.path=/nonexistent"])
    assert gpu.actor_rollout_ref.rollout.name == "vllm"
    assert "env_vars" not in gpu.ray_kwargs.ray_init.runtime_env
    cpu = compose(["backend=cpu"])
    env = cpu.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_USE_EXTERNAL_MODULES == "fgrpo_verl.backends.cpu" and env.VERL_PLATFORM == "cpu" and env.VERL_ENGINE_DEVICE == "cuda"
    r = cpu.actor_rollout_ref
    assert r.rollout.name == "hf" and r.actor.strategy == "fsdp2" and r.ref.strategy == "fsdp2"
    assert r.actor.fsdp_config.mixed_precision.param_dtype == "fp32"
    assert r.model.override_config.attn_implementation == "eager"
    assert cpu.transfer_queue.backend.SimpleStorage.num_data_storage_units == 1
    assert cpu.ray_kwargs.ray_init.num_gpus == cpu.trainer.n_gpus_per_node * cpu.trainer.nnodes


def test_gpu_hf_backend_swaps_only_the_rollout():
    from fgrpo_verl.config.compose import compose

    cfg = compose(["backend=gpu_hf"])
    assert cfg.actor_rollout_ref.rollout.name == "hf"
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    # no VERL_PLATFORM: the GPU platform stays verl's own detection
    assert dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars) == {"VERL_USE_EXTERNAL_MODULES": "fgrpo_verl.backends.gpu_hf"}
    assert cfg.actor_rollout_ref.actor.strategy == compose([]).actor_rollout_ref.actor.strategy


def test_cpu_config_passes_verl_validation():
    from fgrpo_verl.config.compose import compose
    from fgrpo_verl.integration.validation import validate

    validate(compose(["backend=cpu", "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                      "actor_rollout_ref.rollout.n=4"]))


# ---------------------------------------------------------------- the worker-side adapter (no Ray)
class _FakeRemote:
    def __init__(self):
        self.calls = []

    def remote(self, *args, **kwargs):
        self.calls.append((args, kwargs))

        async def done():
            return None

        return done()


def test_adapter_ships_the_drained_weights_to_its_replica_server(monkeypatch):
    from omegaconf import OmegaConf

    from fgrpo_verl.backends.hf_rollout import replica

    rollout = OmegaConf.create({"_target_": "verl.workers.config.RolloutConfig", "name": "hf",
                                "tensor_model_parallel_size": 1})
    drained = []

    def weights():
        for name in ("a", "b"):
            drained.append(name)
            yield name, torch.full((2,), float(len(drained)))

    monkeypatch.setenv("RANK", "0")
    sender = replica.HFServerAdapter(rollout, None, None)
    fake = type("Handle", (), {"update_weights": _FakeRemote()})()
    sender._server = fake
    asyncio.run(sender.update_weights(weights(), global_steps=3))
    (args, kwargs), = fake.update_weights.calls
    assert sorted(args[0]) == ["a", "b"] and kwargs == {"global_steps": 3}
    assert torch.equal(args[0]["b"], torch.full((2,), 2.0))

    # each training rank is its own replica (rollout parallel sizes are 1)
    monkeypatch.setenv("RANK", "1")
    assert replica.HFServerAdapter(rollout, None, None).replica_rank == 1
    wide = OmegaConf.merge(rollout, {"tensor_model_parallel_size": 2})
    with pytest.raises(ValueError, match="parallel size 1"):
        replica.HFServerAdapter(wide, None, None)

    with pytest.raises(ValueError, match="wire_format"):
        asyncio.run(sender.update_weights(iter(()), wire_format="delta_flush"))
    with pytest.raises(ValueError, match="lora.merge=True"):
        asyncio.run(sender.update_weights(iter(()), peft_config={"r": 8}))
