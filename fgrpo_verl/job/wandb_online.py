"""Whether W&B answers from this node, asked before a job that logs to it online loads its model.

verl's W&B logger starts inside the trainer's ``fit()``, after the model and vLLM have loaded: on a compute node
without internet, W&B online fails only then, minutes of GPU time later, with a traceback. So a job whose run logs
to W&B (``FGRPO_WANDB_LOGGER=1``, rendered by the launcher when ``trainer.logger`` has ``wandb``) first runs

    python -m fgrpo_verl.job.wandb_online

which, with ``WANDB_MODE`` online (unset counts: it is W&B's default), asks W&B's host (``WANDB_BASE_URL``, else
the installed wandb's default) once, for at most :data:`TIMEOUT_S` seconds, and fails in one line naming
``WANDB_MODE=offline`` and ``wandb sync``. Any HTTP answer counts, an error status too (the host is there);
proxies from the environment apply as they do for wandb. ``fgrpo-verl doctor`` runs the same check.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterable, Mapping

TIMEOUT_S = 10.0
NOT_ONLINE = ("offline", "dryrun", "disabled")


def logs_to_wandb(loggers) -> bool:
    """Whether verl's ``trainer.logger`` (a list, or one name) has ``wandb``."""
    return "wandb" in ([loggers] if isinstance(loggers, str) else list(loggers or ()))


def check_wandb(loggers: Iterable[str] | str = ("wandb",), environ: Mapping[str, str] = os.environ,
                timeout: float = TIMEOUT_S) -> str:
    """What was found, as a line; a one-line ``RuntimeError`` when the run logs to W&B online and W&B does not
    answer within ``timeout`` seconds (name resolution included: the request runs in a thread waited on)."""
    import urllib.error
    import urllib.request

    if not logs_to_wandb(loggers):
        return "not used (trainer.logger has no wandb)"
    mode = environ.get("WANDB_MODE") or "online"
    if mode in NOT_ONLINE or environ.get("WANDB_DISABLED", "").lower() in ("true", "1"):
        return f"WANDB_MODE={mode}: not checked"
    url = environ.get("WANDB_BASE_URL")
    if not url:
        import wandb

        url = str(wandb.Settings().base_url)
    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
                outcome.append(None)
        except urllib.error.HTTPError:  # an answer, with an error status: the host is reachable
            outcome.append(None)
        except Exception as exc:  # noqa: BLE001 (whatever stops the request is the reason reported)
            outcome.append(exc)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(timeout)
    if outcome and outcome[0] is None:
        return f"online, {url} answers"
    why = f"no answer within {timeout:g} s" if not outcome else str(getattr(outcome[0], "reason", outcome[0]))
    raise RuntimeError(
        f"W&B at {url} does not answer from {socket.gethostname()} ({why}) and this run logs to W&B online: run it "
        "with WANDB_MODE=offline and upload its folders afterwards with `wandb sync` (docs/slurm.md), or drop wandb "
        "from trainer.logger"
    )


def main() -> int:
    try:
        print(f"[fgrpo] W&B: {check_wandb()}")
    except RuntimeError as exc:
        print(f"fgrpo: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
