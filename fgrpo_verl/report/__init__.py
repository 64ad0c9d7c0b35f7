"""``fgrpo-verl report RECIPE``: from a recipe's run directories to the paper's tables, with the paper's numbers
(evaluation/paper_numbers.py) beside ours and what is missing listed.

Reads only files (no Slurm, no GPU, no model): every run is planned as ``fgrpo-verl launch`` plans it (same
identity, so the same checkpoint directory); build.py reads each run (runs.py: state, the protocol's checkpoint, the
final pass) and writes the tables (tables.py), or Table 4 and Figs. 6-7 for a recipe whose runs validate while
training (maze.py). Each table is written as markdown (ours and the paper's on two rows per method) and CSV; the
printed report (report.md) starts with the state of the sweep and leaves out a table with no number of ours (its
file is still written, with the paper's). Everything that keeps a cell empty is listed under "Missing"
(missing.md): nothing is dropped silently.
"""
