"""``fgrpo-verl`` command line: one module per sub-command in this package.

Each sub-command module defines ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int`` and keeps
heavy imports (verl, torch, ray) inside ``run`` so that ``fgrpo-verl --help`` stays instant.

Errors (``errors.py``): a mistake in what the user typed (a ``ValueError``: a bad value, a misspelt key, a missing
input file) is one line ``fgrpo-verl <command>: error: ...`` on stderr and exit status 2; a missing service or
tool (Slurm, vLLM) one line and status 1. ``--debug`` (anywhere on the command line) or ``HYDRA_FULL_ERROR=1``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import logging.handlers
import os
import sys

from fgrpo_verl.cli.errors import DEBUG_FLAG, report_errors

# the sub-commands, in --help's order; each is the module of its name under fgrpo_verl.cli, with '_' for '-'
COMMANDS = ("train", "doctor", "launch", "recipes", "prepare-deepscaler", "prepare-benchmarks", "eval", "report",
            "rare-nll", "wandb-env", "job-env", "demo", "tail-miss", "m-gamma", "simulate")


def _module(command: str):
    return importlib.import_module(f"fgrpo_verl.cli.{command.replace('-', '_')}")


def version() -> str:
    """``fgrpo-verl <version> (verl <version>, python <version>)``, read from the installed metadata (no import of
    verl: ``--version`` must answer at once, also where verl is broken)."""
    from importlib import metadata

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    py = sys.version_info
    return f"fgrpo-verl {installed('fgrpo-verl')} (verl {installed('verl')}, python {py.major}.{py.minor}.{py.micro})"


class OneLineParser(argparse.ArgumentParser):
    """A mistake on the command line is one line: argparse's usage block above it would bury it (``--help`` has
    the usage)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="fgrpo-verl",
        description="F-GRPO (arXiv 2602.06717) for verl: train, check, reproduce.",
        epilog=f"{DEBUG_FLAG} (anywhere) or HYDRA_FULL_ERROR=1: show tracebacks instead of one-line errors",
    )
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = _module(name)
        epilog = getattr(module, "epilog", None)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP, epilog=epilog() if epilog else None,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


# verl's platform detection, which warns in a process without an accelerator (a login node, a CPU machine)
PLATFORM_LOGGER = "verl.plugin.platform.platform_manager"


@contextlib.contextmanager
def held_platform_notices(keep: int = logging.NOTSET):
    """Hold what verl's platform detection logs inside the block; pass on what is at level ``keep`` or above when
    the block succeeds, drop it all when the block raises. ``train``: before a config error those lines only bury
    the error, which says what to fix; ``doctor`` (ERRORs only): its ``platform`` check reports the outcome."""
    platform_logger, held = logging.getLogger(PLATFORM_LOGGER), logging.handlers.BufferingHandler(capacity=2**31)
    propagate, platform_logger.propagate = platform_logger.propagate, False
    platform_logger.addHandler(held)
    try:
        yield
    finally:
        platform_logger.removeHandler(held)
        platform_logger.propagate = propagate
    for record in held.buffer:  # not reached when the block raised
        if record.levelno >= keep:
            platform_logger.handle(record)


def quiet_verl_import_notices() -> None:
    """verl's ``workers/engine/__init__.py`` warns, in every process that imports it, about each optional training
    engine that is not installed (torchtitan, veomni, automodel, mindspeed, megatron): five warnings that nothing
    here uses or can act on. Ignored in fgrpo-verl's own command processes (not by the plugin, which leaves other
    verl runs as they are; Ray workers print theirs into the run's log)."""
    import warnings

    warnings.filterwarnings("ignore", message=r"\w+ engine is not available", category=UserWarning)
    # and its INFO "Platform override from VERL_PLATFORM: cpu" on every backend=cpu command (its WARNINGs stay)
    logging.getLogger(PLATFORM_LOGGER).addFilter(lambda r: r.levelno >= logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    quiet_verl_import_notices()
    # tracebacks instead of one-line errors: --debug anywhere, or Hydra's own switch, which verl users know
    debug = DEBUG_FLAG in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != DEBUG_FLAG]
    command = argv[0] if argv and argv[0] in COMMANDS else None
    return report_errors(command, debug, lambda: _dispatch(argv, debug))


def _dispatch(argv: list[str], debug: bool) -> int:
    # A sub-command with PASS_THROUGH = True (train) takes every later argument verbatim, Hydra's own flags
    # (`--cfg job`, `--info`) included, which argparse would reject or split from their values.
    if argv and argv[0] in COMMANDS and not set(argv[1:2]) & {"-h", "--help"}:
        module = _module(argv[0])
        if getattr(module, "PASS_THROUGH", False):
            return int(module.run(argparse.Namespace(command=argv[0], overrides=argv[1:], debug=debug)) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.debug = debug
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
