"""The core of fgrpo-verl through one verl release's own functions, in a process whose ``verl`` is that release
(tests/test_verl_releases_on_cpu.py puts ``.verl-releases/<version>`` first on PYTHONPATH). Prints one JSON line.

    python tests/verl_release_probe.py
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import make_batch  # noqa: E402


def _error_of(fn) -> str:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001  (the test reads the message)
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def _cli(*argv) -> dict:
    from fgrpo_verl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def advantages(rewards, mask, index) -> dict:
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.ray_trainer import compute_advantage

    def run(name, **fgrpo):
        data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                                   non_tensors={"uid": index})
        config = OmegaConf.create({"adv_estimator": name, "norm_adv_by_std_in_grpo": True, "fgrpo": fgrpo})
        return compute_advantage(data, adv_estimator=name, config=config).batch["advantages"]

    base_name = "grpo_vectorized" if "grpo_vectorized" in ADV_ESTIMATOR_REGISTRY else "grpo"
    base = run(base_name)
    # eqs. 11-13 from the release's own base advantage: g = (1 - X/N)^gamma per prompt group, X = scores > 0.5
    scores = rewards.sum(-1)
    groups = {uid: [i for i, u in enumerate(index) if u == uid] for uid in dict.fromkeys(index)}
    weight = torch.ones(len(index))
    for rows in groups.values():
        weight[rows] = (1.0 - float((scores[rows] > 0.5).float().mean())) ** 0.5
    return {"base": base_name, "gamma0_bitwise": bool(torch.equal(run("fgrpo", gamma=0.0), base)),
            "gamma_half_max_diff": float((run("fgrpo", gamma=0.5) - base * weight[:, None]).abs().max()),
            "gamma_half_acts": not torch.equal(run("fgrpo", gamma=0.5), base)}


def loss() -> dict:
    from hydra import compose, initialize_config_module
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass

    key = "actor_rollout_ref.actor.policy_loss"
    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose("ppo_trainer", overrides=[f"{key}._target_=fgrpo_verl.integration.loss.FocalPolicyLossConfig",
                                                f"{key}.loss_mode=fgrpo", f"+{key}.base_loss_mode=vanilla",
                                                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"])
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(6, 9, generator=g) * 3
    new = (old + 0.3 * torch.randn(6, 9, generator=g)).requires_grad_()
    adv = torch.randn(6, 1, generator=g).expand(6, 9).clone()
    mask = torch.arange(9)[None, :] < torch.randint(1, 10, (6,), generator=g)[:, None]
    if hasattr(actor, "global_batch_info"):  # what verl's ppo_loss fills before calling a loss
        actor.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=6,
                                       loss_scale_factor=None)
    results = []
    for name in ("vanilla", "fgrpo"):
        value, metrics = get_policy_loss_fn(name)(old_log_prob=old, log_prob=new, advantages=adv, response_mask=mask,
                                                  loss_agg_mode="token-mean", config=actor)
        (grad,) = torch.autograd.grad(value, new)
        results.append((value.detach(), grad, metrics))
    return {"bitwise": bool(torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])),
            "metrics": sorted(k for k in results[1][2] if k.startswith("actor/fgrpo/"))}


def config_checks() -> dict:
    from hydra import compose, initialize_config_module
    from verl.utils.config import validate_config

    out = {}
    for name, extra in (("missing gamma", []), ("misspelt key", ["+algorithm.fgrpo.gama=1"])):
        with initialize_config_module("verl.trainer.config", version_base=None):
            cfg = compose("ppo_trainer", overrides=["algorithm.adv_estimator=fgrpo", *extra])
        out[name] = _error_of(lambda cfg=cfg: validate_config(cfg, use_reference_policy=False, use_critic=False))
    return out


def main() -> int:
    import verl

    from fgrpo_verl import verl_compat
    from verl.trainer.ppo import core_algos

    rewards, mask, index = make_batch([8, 8, 8, 4, 1, 3], seed=3)
    out = {"version": verl.__version__, "verl_file": verl.__file__,
           "registered": ["fgrpo" in core_algos.ADV_ESTIMATOR_REGISTRY, "fgrpo" in core_algos.POLICY_LOSS_REGISTRY],
           "advantages": advantages(rewards, mask, np.asarray(index, dtype=object)), "loss": loss(),
           "config": config_checks(), "summary": verl_compat.summary()}
    if not verl_compat.supports(verl_compat.TRAIN):
        out["refusals"] = {"train": _cli("train", "algo=grpo", "backend=cpu"),
                           "launch": _cli("launch", "paper_main", "--dry-run"),
                           "doctor": _cli("doctor", "--no-ray"),
                           "report": _cli("report", "paper_main", "--no-significance"),
                           "cpu backend": _error_of(lambda: __import__("fgrpo_verl.backends.cpu"))}
    print("PROBE " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
