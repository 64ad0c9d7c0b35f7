"""Character-level tokenizer of the rare-mode task: a merge-free ``Qwen2Tokenizer`` with 32 ids, built locally.

Same construction as the maze tokenizer (``fgrpo_verl/tasks/maze/tokenizer.py`` explains why it must be a
Qwen2Tokenizer without merges and why the termination token is the only special token); only the alphabet
differs, so the maze's 32-entry model presets (``fgrpo_verl.tasks.maze.model``) fit unchanged.

====  =================  ==========================================================
id    token              role
====  =================  ==========================================================
0     ``<|endoftext|>``  termination = eos = pad = unk (the only special token)
1     ``<|im_end|>``     plain token verl's Qwen2 continuous-token builder requires
2     ``>``              answer marker (ends every prompt)
3     ``\\n``             verl's Qwen2 builder needs ``"\\n"`` to be one token
4-23  ``a`` ... ``t``    the 20 symbols prompts and answers are made of
24-31 ``<r0>..<r7>``     reserved: every id the model can sample decodes to visible text
====  =================  ==========================================================
"""

from __future__ import annotations

from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer as build_qwen2_tokenizer

ANSWER_MARKER = ">"
SYMBOLS = tuple("abcdefghijklmnopqrst")


def build_tokenizer():
    """The rare-mode tokenizer (eos = pad = unk = ``<|endoftext|>``, left padding, concatenating chat template)."""
    return build_qwen2_tokenizer((ANSWER_MARKER, "\n", *SYMBOLS))
