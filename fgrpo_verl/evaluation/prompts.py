"""Exact model inputs: the paper's prompts (Table 9) as named presets, and one tokenization shared by every back-end.

Token ids, not text. A chat prompt is rendered with the tokenizer's chat template and tokenized *without* adding
special tokens (the template already writes them, e.g. Llama-3's ``<|begin_of_text|>``), the way transformers'
``apply_chat_template(tokenize=True)`` and verl's training rollout do. The ids go to vLLM as ``TokensPrompt`` and to
``transformers.generate`` as they are, so neither engine tokenizes again (vLLM would prepend a second BOS to a
rendered text). ``encode_prompt`` refuses ids starting with two BOS tokens.

Presets (``--prompt-preset``; paper Table 9), per benchmark group:

    preset                  math, gpqa                          ifeval                        synlogic
    qwen2.5-7b (default)    system: PAPER                       system: HELPFUL               system: HELPFUL
    qwen3-4b-base           system: PAPER, thinking on          no system, thinking off       no system, thinking on
    llama-3.2-3b-instruct   system: PAPER (+ template header)   no system (template header)   no system (template header)
    none                    no system prompt, no template variables

PAPER = "Please reason step by step, and put your final answer within \\boxed{}.", HELPFUL = "You are a helpful
assistant.", thinking = the Qwen3 template variable ``enable_thinking``. Llama-3.2's own template writes the
"Cutting Knowledge Date: December 2023 / Today Date: ..." header into the system turn (date: template variable
``date_string``), which is the rest of the paper's Llama prompt. A benchmark's group comes from its name
(``BENCHMARK_GROUPS``, case-insensitive) or ``--bench-group NAME=GROUP``. ``--system-prompt`` and
``--chat-template-kwargs`` override the preset for every benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fgrpo_verl.data.deepscaler import SYSTEM_PROMPT as PAPER_SYSTEM_PROMPT  # the training prompt (§5.3)

HELPFUL_SYSTEM_PROMPT = "You are a helpful assistant."
GROUPS = ("math", "gpqa", "ifeval", "synlogic")
BENCHMARK_GROUPS = {
    **{name: "math" for name in ("aime24", "aime25", "amc", "amc23", "math500", "minerva", "olympiad", "olympiadbench")},
    "gpqa": "gpqa", "ifeval": "ifeval", "synlogic": "synlogic",
}


@dataclass(frozen=True)
class PromptSetting:
    system_prompt: str | None
    template_kwargs: dict = field(default_factory=dict)


_MATH = PromptSetting(PAPER_SYSTEM_PROMPT)
_HELPFUL = PromptSetting(HELPFUL_SYSTEM_PROMPT)
_THINK = {"enable_thinking": True}
PRESETS: dict[str, dict[str, PromptSetting]] = {
    "qwen2.5-7b": {"math": _MATH, "gpqa": _MATH, "ifeval": _HELPFUL, "synlogic": _HELPFUL},
    "qwen3-4b-base": {
        "math": PromptSetting(PAPER_SYSTEM_PROMPT, _THINK), "gpqa": PromptSetting(PAPER_SYSTEM_PROMPT, _THINK),
        "ifeval": PromptSetting(None, {"enable_thinking": False}), "synlogic": PromptSetting(None, _THINK),
    },
    "llama-3.2-3b-instruct": {"math": _MATH, "gpqa": _MATH, "ifeval": PromptSetting(None), "synlogic": PromptSetting(None)},
    "none": {group: PromptSetting(None) for group in GROUPS},
}


def benchmark_group(name: str, overrides: dict[str, str] | None = None) -> tuple[str, bool]:
    """(group, known): ``--bench-group`` first, then Table 9's benchmark names; anything else is "math", known=False."""
    if overrides and name in overrides:
        group = overrides[name]
        if group not in GROUPS:
            raise ValueError(f"--bench-group {name}={group!r}: the group must be one of {GROUPS}")
        return group, True
    group = BENCHMARK_GROUPS.get(name.lower())
    return (group, True) if group else ("math", False)


def prompt_setting(preset: str, group: str, system_prompt: str | None = None,
                   template_kwargs: dict | None = None) -> PromptSetting:
    """The preset's setting for a group; an explicit system prompt ("" = none) / template kwargs replace its own.
    ``preset``: a key of :data:`PRESETS` (the options' ``--prompt-preset`` takes no other)."""
    base = PRESETS[preset][group]
    system = base.system_prompt if system_prompt is None else (system_prompt or None)
    kwargs = dict(base.template_kwargs) if template_kwargs is None else dict(template_kwargs)
    return PromptSetting(system, kwargs)


def encode_prompt(record: dict, tokenizer, setting: PromptSetting, style: str = "chat") -> tuple[list[int], str]:
    """(token ids, text) of the exact model input for one benchmark record.

    ``record["prompt"]`` wins: a string is the exact input text (tokenized without added special tokens: it carries
    its own), a message list is rendered with the chat template. Otherwise ``style="chat"`` renders
    [system (if any), user: problem] with the template and ``setting.template_kwargs``; ``style="raw"`` feeds
    ``system + "\\n\\n" + problem`` as plain text, tokenized *with* the tokenizer's special tokens (the BOS a base
    model expects before plain text, once).
    """
    prompt = record.get("prompt")
    add_special = False
    if isinstance(prompt, str):
        text = prompt
    elif prompt is None and style == "raw":
        text = f"{setting.system_prompt}\n\n{record['problem']}" if setting.system_prompt else record["problem"]
        add_special = True
    else:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"problem {record.get('id')!r} needs a chat template but the tokenizer has none; "
                "use --prompt-style raw (or give a string 'prompt')"
            )
        system = [{"role": "system", "content": setting.system_prompt}] if setting.system_prompt else []
        messages = prompt if isinstance(prompt, list) else [*system, {"role": "user", "content": record["problem"]}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **setting.template_kwargs)
    ids = list(tokenizer(text, add_special_tokens=add_special)["input_ids"])
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and ids[:2] == [bos, bos]:
        raise ValueError(f"problem {record.get('id')!r}: the prompt starts with two BOS tokens ({bos}); "
                         "a string 'prompt' must not repeat the BOS its template already writes")
    return ids, text
