"""``fgrpo-verl eval``: pass@k tables (paper Tables 12-14 layout), curves and the App. Q significance test.

Logic and the options (``fgrpo_verl/evaluation/options.py``) live in ``fgrpo_verl.evaluation``. Formats:
docs/evaluation.md.
"""

from __future__ import annotations

import sys

from fgrpo_verl.evaluation.options import add_arguments, validate  # noqa: F401  (the CLI registers add_arguments)

HELP = "Sample n completions per problem (or load saved ones), score them, write unbiased pass@k tables and plots."


def run(args) -> int:
    from fgrpo_verl.evaluation.pipeline import run_eval

    try:
        validate(args)
        return run_eval(args)
    except ValueError as err:
        print(f"fgrpo-verl eval: error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        if err.name != "vllm":
            raise
        print("fgrpo-verl eval: error: --backend vllm (the default) needs vLLM, which is not installed here: on a GPU "
              "machine pip install 'fgrpo-verl[gpu]'; on CPU use --backend transformers", file=sys.stderr)
        return 1
