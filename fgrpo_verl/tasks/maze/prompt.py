"""Prompt and response formats of the maze task (one character = one token, see tokenizer.py).

Prompt: the grid rows, each followed by a newline, then the answer marker ``>``::

    #######
    #S..#.#
    ###.#.#
    #...#G#
    #.###.#
    #.....#
    #######
    >

(with the newlines as real ``\\n`` tokens). Response: the action characters, then the termination token
``<eos>`` (which ends generation), e.g. ``RRDDLLDDRRRRUUUU<eos>``. verl decodes responses with
``skip_special_tokens=True``, so the reward sees ``RRDDLLDDRRRRUUUU``.
"""

from __future__ import annotations

from fgrpo_verl.tasks.maze.generator import Maze

ANSWER_MARKER = ">"
EOS = "<eos>"
DATA_SOURCE = "maze"


def prompt_text(maze: Maze) -> str:
    """The prompt string of ``maze`` (rows + newlines + answer marker)."""
    return "".join(row + "\n" for row in maze.rows) + ANSWER_MARKER


def prompt_messages(maze: Maze) -> list[dict[str, str]]:
    """The prompt as verl expects it in the ``prompt`` column: one user message (the tokenizer's chat
    template just concatenates contents, so the model sees exactly :func:`prompt_text`)."""
    return [{"role": "user", "content": prompt_text(maze)}]


def response_text(maze: Maze) -> str:
    """The target response, termination token included (used for SFT)."""
    return maze.path + EOS


def parse_grid(text: str) -> tuple[str, ...]:
    """Inverse of :func:`prompt_text` for the grid part: the rows of a prompt (answer marker optional)."""
    if text.endswith(ANSWER_MARKER):
        text = text[: -len(ANSWER_MARKER)]
    rows = tuple(r for r in text.split("\n") if r)
    if not rows or any(len(r) != len(rows[0]) for r in rows):
        raise ValueError(f"maze text is not a rectangular grid: {text!r}")
    return rows
