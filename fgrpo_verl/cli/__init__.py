"""``fgrpo-verl`` command line: one module per sub-command in this package.

Each sub-command module defines ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int`` and keeps
heavy imports (verl, torch, ray) inside ``run`` so that ``fgrpo-verl --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# sub-command name -> module under fgrpo_verl.cli
COMMANDS = {
    "train": "train",
    "doctor": "doctor",
    "launch": "launch",
    "prepare-deepscaler": "prepare_deepscaler",
    "eval": "eval",
    "report": "report",
    "rare-nll": "rare_nll",
    "wandb-env": "wandb_env",
    "demo": "demo",
    "tail-miss": "tail_miss",
    "simulate": "simulate",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fgrpo-verl", description="F-GRPO (arXiv 2602.06717) for verl: train, check, reproduce."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"fgrpo_verl.cli.{module_name}")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    # A sub-command with PASS_THROUGH = True (train) takes every later argument verbatim, Hydra's own flags
    # (`--cfg job`, `--info`) included, which argparse would reject or split from their values.
    if argv and argv[0] in COMMANDS and not set(argv[1:2]) & {"-h", "--help"}:
        module = importlib.import_module(f"fgrpo_verl.cli.{COMMANDS[argv[0]]}")
        if getattr(module, "PASS_THROUGH", False):
            return int(module.run(argparse.Namespace(command=argv[0], overrides=argv[1:])) or 0)
    args = parser.parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
