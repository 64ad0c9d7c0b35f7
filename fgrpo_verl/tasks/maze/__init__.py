"""The maze single-solution task of the F-GRPO paper (§5.2): generator, tokenizer, formats, reward, data, model.

``build(out_dir, size=..., n_train=..., n_val=..., model_preset=..., seed=...)`` writes everything into one
directory; ``python -m fgrpo_verl.tasks.maze --help`` does the same from the shell.
"""

from fgrpo_verl.tasks.maze.build import MazeBuild, build

__all__ = ["MazeBuild", "build"]
