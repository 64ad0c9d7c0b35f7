"""``fgrpo-verl eval``: pass@k tables (paper Tables 12-14 layout), curves and the App. Q significance test.

Logic and the options (``fgrpo_verl/evaluation/options.py``) live in ``fgrpo_verl.evaluation``. Formats:
docs/evaluation.md.
"""

from __future__ import annotations

from fgrpo_verl.evaluation.options import add_arguments  # noqa: F401  (the CLI registers add_arguments)

HELP = "Sample n completions per problem (or load saved ones), score them, write unbiased pass@k tables and plots."


def run(args) -> int:
    from fgrpo_verl.evaluation.options import EvalOptions, eval_options
    from fgrpo_verl.evaluation.pipeline import run_eval

    try:
        return run_eval(eval_options(**{k: v for k, v in vars(args).items() if k in EvalOptions.model_fields}))
    except ModuleNotFoundError as err:
        if err.name != "vllm":
            raise
        # "No module named 'vllm'" alone does not say that the default backend is the reason, nor the way around it
        raise RuntimeError("--backend vllm (the default) needs vLLM, which is not installed here: on a GPU machine "
                           "pip install 'fgrpo-verl[gpu]'; on CPU use --backend transformers") from err
