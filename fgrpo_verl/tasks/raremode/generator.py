"""Prompts, correct sets and the skewed warm-start distribution of the rare-mode task.

A prompt is ``k`` distinct symbols out of 20 followed by the answer marker, e.g. ``dkqa>``. A response is one
symbol and the termination token. **Correct** iff the symbol is one of the prompt's symbols, so every prompt has
exactly ``k`` correct responses, few enough to enumerate and score exactly (``measure.py``).

The SFT warm start (:func:`sft`) does not teach the correct set uniformly: for every example it draws the answer
from :func:`warm_start_distribution`, which puts ``anchor`` of the mass on the prompt's **first** symbol, spreads
``rare`` over its other symbols, and gives the rest to symbols not in the prompt (so the warm-started policy is
right only part of the time and GRPO groups are active). The result mirrors the paper's categorical picture
(§5.1): one anchor correct answer per prompt, several rare correct ones, and incorrect mass.

Splits: held-out prompts come from the stream ``"{seed}:val"``, train prompts from ``"{seed}:train"`` with every
held-out prompt excluded (a prompt is an ordered tuple, so the anchor is part of its identity).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from fgrpo_verl.tasks.maze.sft import SFTConfig, train_steps
from fgrpo_verl.tasks.maze.tokenizer import build_tokenizer as build_qwen2_tokenizer
from fgrpo_verl.theory._checks import real_array, whole

ANSWER_MARKER = ">"
SYMBOLS = tuple("abcdefghijklmnopqrst")


def build_tokenizer():
    """The rare-mode tokenizer: a merge-free ``Qwen2Tokenizer`` with 32 ids (eos = pad = unk = ``<|endoftext|>``,
    left padding, concatenating chat template), built locally. The maze tokenizer's construction
    (``fgrpo_verl/tasks/maze/tokenizer.py`` explains why it must be a Qwen2Tokenizer without merges and why the
    termination token is the only special token) with another alphabet, so the maze's 32-entry model presets
    (``fgrpo_verl.tasks.maze.model``) fit unchanged:

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
    return build_qwen2_tokenizer((ANSWER_MARKER, "\n", *SYMBOLS))


@dataclass(frozen=True)
class RarePrompt:
    symbols: tuple[str, ...]  # distinct, ordered; symbols[0] is the anchor the warm start prefers

    @property
    def text(self) -> str:
        return "".join(self.symbols) + ANSWER_MARKER

    @property
    def correct(self) -> tuple[str, ...]:
        return self.symbols


def check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= len(SYMBOLS) // 2:
        raise ValueError(f"k (symbols per prompt = correct answers per prompt) must be an int in [2, {len(SYMBOLS) // 2}], got {k!r}")
    return k


def n_distinct_prompts(k: int) -> int:
    return math.perm(len(SYMBOLS), check_k(k))


def generate_split(k: int, count: int, seed: int, stream: str, exclude: frozenset = frozenset()) -> list[RarePrompt]:
    """``count`` distinct prompts of ``k`` symbols from the stream ``f"{seed}:{stream}"``, none in ``exclude``."""
    check_k(k)
    whole("count", count)
    available = n_distinct_prompts(k) - len(exclude)
    if count > available:
        raise ValueError(f"asked for {count} distinct prompts of k={k} symbols, only {available} exist outside the excluded set")
    rng = random.Random(f"{seed}:{stream}")
    seen, out = set(exclude), []
    while len(out) < count:
        prompt = RarePrompt(tuple(rng.sample(SYMBOLS, k)))
        if prompt.symbols not in seen:
            seen.add(prompt.symbols)
            out.append(prompt)
    return out


@dataclass(frozen=True)
class WarmStart:
    """Answer distribution the SFT data is drawn from: ``anchor`` on the prompt's first symbol, ``rare`` split
    evenly over its other symbols, ``distractor`` on one incorrect symbol (:func:`distractor`, a common wrong
    answer), and the rest split evenly over the other symbols not in the prompt."""

    anchor: float = 0.45
    rare: float = 0.15
    distractor: float = 0.3

    def __post_init__(self):
        for name, low_open in (("anchor", True), ("rare", True), ("distractor", False)):
            real_array(f"WarmStart.{name}", getattr(self, name), low=0.0, high=1.0, low_open=low_open, high_open=True)
        if self.anchor + self.rare + self.distractor >= 1:
            raise ValueError(
                f"WarmStart anchor + rare + distractor must be < 1 (the rest is spread over the other incorrect "
                f"symbols), got {self.anchor} + {self.rare} + {self.distractor}"
            )


def distractor(prompt: RarePrompt) -> str:
    """The incorrect symbol the warm start over-produces: the first symbol after the anchor (cyclically in the
    alphabet) that is not in the prompt."""
    i = SYMBOLS.index(prompt.symbols[0])
    following = (SYMBOLS[(i + step) % len(SYMBOLS)] for step in range(1, len(SYMBOLS)))
    return next(s for s in following if s not in prompt.symbols)  # there is one: k <= len(SYMBOLS) / 2


def warm_start_distribution(prompt: RarePrompt, warm: WarmStart) -> dict[str, float]:
    d = distractor(prompt)
    others = [s for s in SYMBOLS if s not in prompt.symbols and s != d]
    dist = {s: (1 - warm.anchor - warm.rare - warm.distractor) / len(others) for s in others}
    dist[d] = warm.distractor
    dist[prompt.symbols[0]] = warm.anchor
    for s in prompt.symbols[1:]:
        dist[s] = warm.rare / (len(prompt.symbols) - 1)
    return dist


def sample_warm_answer(prompt: RarePrompt, warm: WarmStart, rng: random.Random) -> str:
    dist = warm_start_distribution(prompt, warm)
    return rng.choices(list(dist), weights=list(dist.values()))[0]


def sft(model, tokenizer, prompts: list[RarePrompt], warm: WarmStart, config: SFTConfig) -> list[float]:
    """The SFT warm start: train ``model`` in place on answers drawn from :func:`warm_start_distribution` and
    return the per-step losses. Each step draws ``config.batch_size`` train prompts and, for each, a fresh answer
    (anchor / rare / incorrect), then minimises next-token cross-entropy of the answer and the termination token
    (prompt positions unlabelled): the fitted policy approximates that distribution on unseen prompts, which gives the
    RL phase an anchor correct answer, rare correct answers, and incorrect mass. The maze's loop and config
    (``fgrpo_verl.tasks.maze.sft``), with a constant learning rate; all prompts have one length, so no padding."""
    import torch

    rng = random.Random(f"{config.seed}:sft")
    prompt_ids = [tokenizer.encode(p.text, add_special_tokens=False) for p in prompts]
    eos = tokenizer.eos_token_id
    symbol_id = {s: tokenizer.convert_tokens_to_ids(s) for s in SYMBOLS}

    def next_batch():
        idx = [rng.randrange(len(prompts)) for _ in range(config.batch_size)]
        ids = torch.tensor([prompt_ids[i] + [symbol_id[sample_warm_answer(prompts[i], warm, rng)], eos] for i in idx])
        labels = torch.full_like(ids, -100)
        labels[:, -2:] = ids[:, -2:]
        return ids, labels

    return train_steps(model, next_batch, config)
