"""Exact prompts: one BOS, the same token ids as verl's training data path, Table 9 presets, per-request seeds."""

import json

import pytest

from evaluation_tiny_lm import BOS, LLAMA_TEMPLATE, QWEN3_TEMPLATE, chat_tokenizer
from fgrpo_verl.evaluation.formats import load_benchmark
from fgrpo_verl.evaluation.generate import Request, TransformersSampler
from fgrpo_verl.evaluation.prompts import (
    HELPFUL_SYSTEM_PROMPT, PAPER_SYSTEM_PROMPT, PRESETS, benchmark_group, encode_prompt, prompt_setting,
)
from fgrpo_verl.evaluation.generate import blocks, request_seed

@pytest.fixture(scope="module")
def llama():
    return chat_tokenizer(LLAMA_TEMPLATE, with_bos=True)


@pytest.fixture(scope="module")
def qwen3():
    return chat_tokenizer(QWEN3_TEMPLATE, with_bos=False)


def test_exactly_one_bos_where_text_prompts_get_two(llama):
    record = {"id": "0", "problem": "What is 2 + 2?"}
    ids, text = encode_prompt(record, llama, prompt_setting("llama-3.2-3b-instruct", "math"))
    bos = llama.bos_token_id
    assert text.startswith(BOS)
    assert ids[0] == bos and ids.count(bos) == 1
    # the pitfall this avoids: an engine that tokenizes the rendered text with special tokens adds a second BOS
    assert llama(text)["input_ids"][:2] == [bos, bos]
    # raw style: plain text, the tokenizer's own BOS once
    raw, _ = encode_prompt(record, llama, prompt_setting("llama-3.2-3b-instruct", "math"), style="raw")
    assert raw[0] == bos and raw.count(bos) == 1
    # a verbatim string prompt is the exact input: its own BOS is kept, none is added; a doubled one is refused
    verbatim, _ = encode_prompt({"id": "1", "prompt": text}, llama, prompt_setting("none", "math"))
    assert verbatim == ids
    with pytest.raises(ValueError, match="two BOS"):
        encode_prompt({"id": "2", "prompt": BOS + text}, llama, prompt_setting("none", "math"))


def _verl_training_ids(tmp_path, tokenizer, messages, template_kwargs, model_type):
    """The ids verl 0.9.1's training path feeds the rollout: RLHFDataset row -> raw_prompt -> the agent loop's
    Continuous Token builder (build_initial_tokens)."""
    import pandas as pd
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    path = tmp_path / "train.parquet"
    pd.DataFrame([{"data_source": "B", "prompt": messages, "ability": "math",
                   "reward_model": {"style": "rule", "ground_truth": "4"}, "extra_info": {"index": 0}}]).to_parquet(path)
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 512, "filter_overlong_prompts": False,
                               "apply_chat_template_kwargs": template_kwargs, "cache_dir": str(tmp_path / "cache")})
    row = RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=config)[0]
    builder = create_continuous_token_builder(tokenizer, model_family="auto", hf_model_type=model_type,
                                              chat_template_kwargs=template_kwargs)
    return list(builder.build_initial_tokens(row["raw_prompt"])), path


@pytest.mark.parametrize("which,preset,group", [
    ("llama", "llama-3.2-3b-instruct", "math"), ("llama", "llama-3.2-3b-instruct", "ifeval"),
    ("qwen3", "qwen3-4b-base", "math"), ("qwen3", "qwen3-4b-base", "ifeval"), ("qwen3", "qwen2.5-7b", "synlogic"),
])
def test_eval_ids_equal_verl_training_ids(which, preset, group, llama, qwen3, tmp_path):
    tok = llama if which == "llama" else qwen3
    setting = prompt_setting(preset, group)
    problem = "What is 2 + 2?"
    messages = ([{"role": "system", "content": setting.system_prompt}] if setting.system_prompt else []) + [
        {"role": "user", "content": problem}]
    model_type = "llama" if which == "llama" else "qwen3"  # what verl reads from config.json to pick its builder
    want, parquet = _verl_training_ids(tmp_path, tok, messages, setting.template_kwargs, model_type)
    ids, _ = encode_prompt({"id": "0", "problem": problem}, tok, setting)
    assert ids == want
    # the verl parquet row itself, read as a benchmark file, gives the same ids
    record = load_benchmark(parquet, "B")[0]
    assert encode_prompt(record, tok, setting)[0] == want
    if which == "qwen3" and group == "ifeval":
        assert tok.convert_tokens_to_ids("<think>") in ids  # thinking off: the template's empty think block


def test_table9_presets():
    assert prompt_setting("qwen2.5-7b", "math").system_prompt == PAPER_SYSTEM_PROMPT
    assert prompt_setting("qwen2.5-7b", "ifeval").system_prompt == HELPFUL_SYSTEM_PROMPT
    assert prompt_setting("qwen3-4b-base", "math").template_kwargs == {"enable_thinking": True}
    ifeval = prompt_setting("qwen3-4b-base", "ifeval")
    assert ifeval.system_prompt is None and ifeval.template_kwargs == {"enable_thinking": False}
    synlogic = prompt_setting("qwen3-4b-base", "synlogic")
    assert synlogic.system_prompt is None and synlogic.template_kwargs == {"enable_thinking": True}
    assert prompt_setting("llama-3.2-3b-instruct", "ifeval").system_prompt is None
    # explicit options replace the preset's; "" means no system prompt
    assert prompt_setting("qwen2.5-7b", "math", system_prompt="").system_prompt is None
    assert prompt_setting("qwen3-4b-base", "math", template_kwargs={}).template_kwargs == {}
    assert set(PRESETS) == {"qwen2.5-7b", "qwen3-4b-base", "llama-3.2-3b-instruct", "none"}
    assert benchmark_group("AIME24") == ("math", True) and benchmark_group("ifeval") == ("ifeval", True)
    assert benchmark_group("toy") == ("math", False)
    assert benchmark_group("toy", {"toy": "synlogic"}) == ("synlogic", True)
    with pytest.raises(ValueError, match="must be one of"):
        benchmark_group("toy", {"toy": "maths"})


def test_cli_preset_reaches_the_prompt(tmp_path, capsys):
    """The CLI's --prompt-preset/--bench-group pick the system prompt that lands in the saved prompt text."""
    from evaluation_tiny_lm import build_tiny_lm, fake_vllm_imported
    from fgrpo_verl.cli import main
    from fgrpo_verl.evaluation.formats import read_generations

    model = build_tiny_lm(tmp_path / "m")
    with fake_vllm_imported(tmp_path / "fake"):
        bench = tmp_path / "b.jsonl"
        bench.write_text(json.dumps({"id": 0, "problem": "q", "answer": "1"}) + "\n")
        for preset, group, want in (("qwen2.5-7b", "ifeval", HELPFUL_SYSTEM_PROMPT), ("qwen2.5-7b", "math", PAPER_SYSTEM_PROMPT),
                                    ("qwen3-4b-base", "ifeval", None)):
            out = tmp_path / f"{preset}-{group}"
            assert main(["eval", "--model", f"m={model}", "--bench", f"toy={bench}", "--bench-group", f"toy={group}",
                         "--prompt-preset", preset, "--n", "2", "--scorer", "boxed", "--out", str(out), "--no-plots"]) == 0
            prompt = read_generations(out / "generations.jsonl")[0].prompt
            assert (want in prompt) if want else ("system" not in prompt)
        assert main(["eval", "--model", f"m={model}", "--bench", f"toy={bench}", "--bench-group", "other=math",
                     "--n", "2", "--out", str(tmp_path / "bad"), "--no-plots"]) == 2
        assert "--bench-group names benchmarks not given" in capsys.readouterr().err


def test_transformers_sampler_generates_from_the_ids_it_is_given():
    import torch

    seen = []

    class Model:
        def generate(self, input_ids, attention_mask, **kwargs):
            seen.append((input_ids.tolist(), torch.initial_seed()))
            return torch.cat([input_ids, torch.zeros(input_ids.shape[0], 1, dtype=torch.long)], dim=1)

    class Tok:
        pad_token_id = 0

        def batch_decode(self, ids, skip_special_tokens):
            return ["x"] * len(ids)

    sampler = TransformersSampler.__new__(TransformersSampler)
    sampler.torch, sampler.tokenizer, sampler.model, sampler.device, sampler.batch_size = torch, Tok(), Model(), "cpu", 2
    out = sampler.sample([Request([5, 6, 7], 3, 11), Request([9], 1, 12)], temperature=1.0, top_p=1.0, max_new_tokens=1)
    assert [len(o) for o in out] == [3, 1]
    assert seen == [([[5, 6, 7]] * 2, 11), ([[5, 6, 7]], 11), ([[9]], 12)]


def test_request_seeds_are_reproducible_and_distinct():
    base = request_seed(0, "GRPO", "AIME24", "7", 0)
    assert base == request_seed(0, "GRPO", "AIME24", "7", 0)
    others = [request_seed(1, "GRPO", "AIME24", "7", 0), request_seed(0, "F-GRPO", "AIME24", "7", 0),
              request_seed(0, "GRPO", "AIME25", "7", 0), request_seed(0, "GRPO", "AIME24", "8", 0),
              request_seed(0, "GRPO", "AIME24", "7", 1)]
    assert len({base, *others}) == 6
    # fields never run into each other
    assert request_seed(0, "a", "b c", "1", 0) != request_seed(0, "a b", "c", "1", 0)
    assert all(0 <= s < 2**63 for s in [base, *others])
    assert blocks(10, 4) == [(0, 4), (1, 4), (2, 2)] and blocks(4, 4) == [(0, 4)]
    with pytest.raises(ValueError):
        blocks(4, 0)
