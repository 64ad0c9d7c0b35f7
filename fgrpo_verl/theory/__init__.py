"""The paper's theory as tools (arXiv 2602.06717 §3, App. D, I, J, N).

- ``tail_miss``: active probability (eq. 7), tail-miss probability (Lemma 3.1) and its peak over N.
- ``shrink``: the mean advantage-scale shrink factor m_γ (App. N) and the g·|A| curves of Fig. 4 (App. I).
- ``categorical``: the categorical simulation of §5.1 / Fig. 2 (torch, imported lazily by its users).
- ``plots``: App. Fig. 3, Fig. 4 and Fig. 2 as PNGs (matplotlib, Agg).
"""

from fgrpo_verl.theory.shrink import focal_advantage_magnitudes, mean_shrink
from fgrpo_verl.theory.tail_miss import active_probability, peak_group_size, tail_miss_probability

__all__ = ["active_probability", "focal_advantage_magnitudes", "mean_shrink", "peak_group_size", "tail_miss_probability"]
