"""A tiny random-weight Qwen2 causal LM with a locally trained byte-level BPE tokenizer (no downloads).

Shared by the evaluation tests (not collected: the name does not start with ``test_``).
"""

import sys
from contextlib import contextmanager
from pathlib import Path

CORPUS = [
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "What is 1 + 1? The answer is \\boxed{2}. What is 3 * 4? \\boxed{12}",
    "maze: go up, go left, go down, go right. path found.",
] * 20

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_lm(directory: Path, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(directory)
    return directory


# ---- chat tokenizers in the two families the paper's models use, and a vLLM-servable model for either ----------
BOS = "<|begin_of_text|>"
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
QWEN3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def chat_tokenizer(template: str, with_bos: bool):
    """A locally trained byte-level BPE tokenizer; with_bos: Llama-3 style (a post-processor adds BOS to text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from fgrpo_verl.evaluation.prompts import HELPFUL_SYSTEM_PROMPT, PAPER_SYSTEM_PROMPT

    specials = [BOS, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>",
                "<|endoftext|>", "<think>", "</think>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([PAPER_SYSTEM_PROMPT, HELPFUL_SYSTEM_PROMPT, "What is 2 + 2? system user assistant"] * 5,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if with_bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, tok.token_to_id(BOS))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   bos_token=BOS if with_bos else None)
    fast.chat_template = template
    return fast



def build_chat_lm(directory: Path, tokenizer, arch: str = "llama", seed: int = 0, hidden: int = 64,
                  layers: int = 2) -> Path:
    """A random-weight causal LM around ``tokenizer``, saved with it. 2 heads of hidden/2: vLLM's CPU attention
    takes head_dim 32 (hidden 64) but not 16."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    directory = Path(directory)
    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[arch]
    torch.manual_seed(seed)
    config = config_cls(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                        num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                        max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                        tie_word_embeddings=True)
    model_cls(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


# ---- a stand-in `vllm` package (no GPU here): records every call, samples deterministically from the request seed --
FAKE_VLLM = '''
"""Stand-in for vLLM's offline API, written by tests/evaluation_tiny_lm.py. Appends every call to $FAKE_VLLM_LOG."""
import json, os, random, time
from types import SimpleNamespace


def _record(obj):
    path = os.environ.get("FAKE_VLLM_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(obj) + "\\n")


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LLM:
    def __init__(self, **kwargs):
        _record({"engine": {k: v for k, v in kwargs.items()}})

    def generate(self, prompts, sampling_params, use_tqdm=True):
        assert isinstance(sampling_params, list) and len(sampling_params) == len(prompts)
        _record({"generate": [{"prompt": p, "params": q.kwargs} for p, q in zip(prompts, sampling_params)]})
        time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))
        pad = "x" * int(os.environ.get("FAKE_VLLM_CHARS", "0"))
        out = []
        for q in sampling_params:
            rng = random.Random(q.kwargs["seed"])  # the request's own generator: samples depend on its seed only
            out.append(SimpleNamespace(outputs=[SimpleNamespace(text="\\\\boxed{%d}%s" % (rng.randint(0, 3), pad))
                                                for _ in range(q.kwargs["n"])]))
        return out
'''

FAKE_VLLM_INPUTS = '''
def TokensPrompt(**kwargs):  # vLLM's is a TypedDict: a plain dict at run time
    return dict(kwargs)
'''

FAKE_VLLM_PLATFORMS = '''
from types import SimpleNamespace

current_platform = SimpleNamespace(is_cpu=lambda: False)  # the stand-in plays vLLM on a GPU
'''

FAKE_SCORERS = '''
def flaky(data_source, solution_str, ground_truth, extra_info=None):
    """Correct iff the boxed digit equals the answer; raises on a boxed 3 (a scorer that fails on some samples)."""
    got = solution_str.split("{", 1)[1].split("}", 1)[0]
    if got == "3":
        raise ValueError("cannot parse 3")
    return got == str(ground_truth)
'''


def write_fake_vllm(directory: Path) -> Path:
    """A directory to put on sys.path / PYTHONPATH: packages ``vllm`` (stand-in) and module ``fake_scorers``."""
    directory = Path(directory)
    (directory / "vllm").mkdir(parents=True, exist_ok=True)
    (directory / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    (directory / "vllm" / "inputs.py").write_text(FAKE_VLLM_INPUTS)
    (directory / "vllm" / "platforms.py").write_text(FAKE_VLLM_PLATFORMS)
    (directory / "fake_scorers.py").write_text(FAKE_SCORERS)
    return directory


def _vllm_or_fake(name: str) -> bool:
    return name in ("vllm", "fake_scorers") or name.startswith("vllm.")


@contextmanager
def fake_vllm_imported(directory: Path):
    """The stand-in ``vllm`` importable in this process, for the ``with`` block.

    The real vLLM (installed for backend=cpu_vllm; verl's checkpoint engines import it) is hidden from
    ``sys.modules`` meanwhile and put back after, so neither package sees the other's modules.
    """
    directory = str(write_fake_vllm(directory))
    hidden = {name: module for name, module in sys.modules.items() if _vllm_or_fake(name)}
    for name in hidden:
        del sys.modules[name]
    sys.path.insert(0, directory)
    try:
        yield Path(directory)
    finally:
        sys.path.remove(directory)
        for name in [name for name in sys.modules if _vllm_or_fake(name)]:
            del sys.modules[name]
        sys.modules.update(hidden)
