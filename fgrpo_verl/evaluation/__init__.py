"""Offline evaluation: the paper's significance test, tables/plots, ΔNLL_rare, evaluation jobs.

The unbiased pass@k estimator itself is ``fgrpo_verl/pass_at_k.py`` (numpy only: training-side metrics and the
demos use it without this package); generation back-ends import torch/vLLM lazily.
"""
