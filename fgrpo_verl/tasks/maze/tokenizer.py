"""A character-level HuggingFace tokenizer for the maze task, built locally (no hub).

It is a ``Qwen2Tokenizer`` (byte-level BPE) with a 32-entry vocabulary and **no merges**, so every character of
a maze prompt or response is exactly one token. It must be a Qwen2 tokenizer: transformers 5 forces
``Qwen2Tokenizer`` for any directory whose ``config.json`` says ``model_type: qwen2``
(``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS``) and rebuilds it from the saved vocab and merges with Qwen's
pre-tokenizer, so a tokenizer of another kind saved next to our Qwen2 model would silently change on load
(a WordLevel one lost every ``\\n``). Built as a Qwen2Tokenizer from the start, the model directory, a
tokenizer-only directory and the in-memory object all tokenize identically.

Vocabulary (32 ids, the paper preset's ``vocab_size``):

====  =================  ======================================================================
id    token              role
====  =================  ======================================================================
0     ``<|endoftext|>``  termination token = eos = pad = unk (the only special token)
1     ``<|im_end|>``     a plain token, present because verl's Qwen2 continuous-token builder requires it
2-7   ``# . S G \\n >``   wall, open square, start, goal, row end, answer marker
8-11  ``U D L R``        actions
12-31 ``<r0>..<r19>``    reserved, so that every id the 32-way model can sample decodes to visible text
====  =================  ======================================================================

Why only one special token: verl decodes responses with ``skip_special_tokens=True`` before the reward sees
them. A special token sampled in the middle of a response would vanish from the string and could turn a wrong
response into an exact match. The only special token here is the termination token, which ends generation,
so nothing can be hidden; every other stray token decodes to visible text that the reward rejects. Using it as
pad is safe because verl builds masks from lengths, not pad ids.
"""

from __future__ import annotations

EOS_TOKEN = "<|endoftext|>"
IM_END_TOKEN = "<|im_end|>"
TASK_CHARS = ("#", ".", "S", "G", "\n", ">", "U", "D", "L", "R")
VOCAB_SIZE = 32

# The prompt is already the whole input: the template only concatenates message contents, and adds nothing
# for the generation prompt (the answer marker ``>`` ends every prompt).
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def build_tokenizer(chars: tuple[str, ...] = TASK_CHARS):
    """Return the maze tokenizer (a ``Qwen2Tokenizer`` without merges; eos = pad = unk = ``<|endoftext|>``).

    Ids (the table in the module docstring): the two special-purpose tokens, then one per character of ``chars``,
    then reserved tokens up to 32; another alphabet (the rare-mode task's) gives the same kind of tokenizer."""
    from tokenizers import pre_tokenizers
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)  # what BPE stores: \n -> Ċ
    tokens = [EOS_TOKEN, IM_END_TOKEN, *(byte_level.pre_tokenize_str(c)[0][0] for c in chars)]
    tokens += [f"<r{i}>" for i in range(VOCAB_SIZE - len(tokens))]
    tokenizer = Qwen2Tokenizer(
        vocab={tok: i for i, tok in enumerate(tokens)}, merges=[], unk_token=EOS_TOKEN, eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN, padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
