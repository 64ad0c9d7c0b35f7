"""Offline evaluation: unbiased pass@k, the paper's significance test, tables/plots, ΔNLL_rare.

Only the light-weight estimator is imported here so that ``from fgrpo_verl.evaluation import pass_at_k`` pulls in
numpy alone (training-side metrics and the maze demo use it); generation back-ends import torch/vLLM lazily.
"""

from fgrpo_verl.evaluation.pass_at_k import ks_up_to, mean_pass_at_k, pass_at_k

__all__ = ["pass_at_k", "mean_pass_at_k", "ks_up_to"]
