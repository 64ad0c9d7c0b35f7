"""A character-level HuggingFace tokenizer for the maze task, built locally (no hub).

Vocabulary (32 ids, the paper preset's ``vocab_size``):

====  =============  ==========================================================================
id    token          role
====  =============  ==========================================================================
0     ``<eos>``      termination token; also the pad token (the only special token)
1     ``<unk>``      unknown character (never in task data)
2     ``<|im_end|>`` present only because verl's Qwen2 continuous-token builder requires it
3-8   ``# . S G \\n >``  wall, open square, start, goal, row end, answer marker
9-12  ``U D L R``    actions
13-31 ``<r0>..``     reserved, so that every id the 32-way model can sample decodes to visible text
====  =============  ==========================================================================

Why only ``<eos>`` is special: verl decodes responses with ``skip_special_tokens=True`` before the reward
sees them. A special token sampled in the middle of a response (a separate pad, unk or reserved token) would
vanish from the string and could turn a wrong response into an exact match. Here the only special token is
``<eos>``, which ends generation, so nothing can be hidden; every other stray token decodes to visible text
that the reward rejects. Using ``<eos>`` as pad is safe because verl builds masks from lengths, not pad ids.

The pre-tokenizer splits every character (``\\n`` included: verl's Qwen2 builder checks that ``"\\n"``
encodes to one token), and the ``Fuse`` decoder concatenates, so ``decode(encode(s)) == s``.
"""

from __future__ import annotations

from pathlib import Path

EOS_TOKEN = "<eos>"
UNK_TOKEN = "<unk>"
IM_END_TOKEN = "<|im_end|>"
TASK_TOKENS = ["#", ".", "S", "G", "\n", ">", "U", "D", "L", "R"]
VOCAB_SIZE = 32
VOCAB = [EOS_TOKEN, UNK_TOKEN, IM_END_TOKEN, *TASK_TOKENS]
VOCAB += [f"<r{i}>" for i in range(VOCAB_SIZE - len(VOCAB))]

# The prompt is already the whole input: the template only concatenates message contents, and adds nothing
# for the generation prompt (the answer marker ``>`` ends every prompt).
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def build_tokenizer():
    """Return the maze ``PreTrainedTokenizerFast`` (char-level WordLevel, eos = pad = ``<eos>``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({tok: i for i, tok in enumerate(VOCAB)}, unk_token=UNK_TOKEN))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tokenizer(out_dir: str | Path):
    """Build the tokenizer and ``save_pretrained`` it into ``out_dir`` (loadable with ``AutoTokenizer``)."""
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer
