"""The rare-mode task: several enumerable correct answers per prompt, a warm start that prefers one of them.

It makes the symptom the paper names (§3, §5.1: correct mass concentrating on what the policy already samples,
rare correct answers losing theirs) measurable exactly through verl: the correct mass Q_pos, the retained mass M_ret
of the initially rare correct answers (eq. 26) and their ΔNLL (App. M.2) are teacher-forced sums, not sample
estimates. ``fgrpo-verl demo`` (default task) runs it; docs/raremode.md has the design and results, among them that
the loss here is not the paper's finite-N tail miss.
"""
