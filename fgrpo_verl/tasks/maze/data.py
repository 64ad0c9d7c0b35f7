"""Prompt and response formats of the maze task (one character = one token, see tokenizer.py), and its train /
held-out parquet files in verl's RL dataset format (``verl.utils.dataset.rl_dataset.RLHFDataset``).

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
``<|endoftext|>`` (which ends generation), e.g. ``RRDDLLDDRRRRUUUU<|endoftext|>``. verl decodes responses with
``skip_special_tokens=True``, so the reward sees ``RRDDLLDDRRRRUUUU``.

Columns: ``data_source`` ("maze", selects the reward via ``data.reward_fn_key``), ``prompt`` (list of chat
messages; verl applies the tokenizer's chat template, ours concatenates), ``ability``, ``reward_model``
({"style": "rule", "ground_truth": <action string>}), ``extra_info`` ({"split", "index", "size", "maze",
"path_length"}; ``index`` is what verl reports per sample, ``maze`` feeds the ``reach`` reward rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fgrpo_verl.data.records import write_rows
from fgrpo_verl.tasks.maze.generator import Maze, generate_split
from fgrpo_verl.tasks.maze.tokenizer import EOS_TOKEN as EOS

ANSWER_MARKER = ">"
DATA_SOURCE = "maze"
ABILITY = "maze_navigation"


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


def maze_row(maze: Maze, split: str, index: int) -> dict:
    """One parquet row for ``maze``."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": prompt_messages(maze),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": maze.path},
        "extra_info": {
            "split": split,
            "index": index,
            "size": maze.size,
            "maze": prompt_text(maze),
            "path_length": len(maze.path),
        },
    }


@dataclass(frozen=True)
class Splits:
    """A task's train and held-out items (mazes here, prompts in the rare-mode task)."""

    train: list
    val: list


def make_splits(size: int, n_train: int, n_val: int, seed: int) -> Splits:
    """Held-out mazes first, then train mazes from another seed stream with every held-out maze excluded."""
    val = generate_split(size, n_val, seed, "val")
    train = generate_split(size, n_train, seed, "train", exclude={m.key() for m in val})
    return Splits(train=train, val=val)


def write_parquet(mazes: list[Maze], split: str, path: str | Path) -> Path:
    return write_rows([maze_row(m, split, i) for i, m in enumerate(mazes)], path)
