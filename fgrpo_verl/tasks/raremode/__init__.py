"""The rare-mode task: several enumerable correct answers per prompt, a warm start that prefers one of them.

It makes the paper's mechanism (§3, §5.1) measurable exactly through verl: the correct mass Q_pos, the retained
mass M_ret of the initially rare correct answers (eq. 26) and their ΔNLL (App. M.2) are teacher-forced sums, not
sample estimates. ``fgrpo-verl demo`` (default task) runs it; docs/raremode.md has the design and results.
"""
