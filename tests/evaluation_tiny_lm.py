"""A tiny random-weight Qwen2 causal LM with a locally trained byte-level BPE tokenizer (no downloads).

Shared by the evaluation tests (not collected: the name does not start with ``test_``).
"""

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
