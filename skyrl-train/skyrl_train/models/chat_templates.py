"""Chat templates chosen from config (`generator.chat_template`): the tokenizer's own, one built into the project by
name, or a Jinja file. The driver's tokenizer renders every prompt and turn (rollouts are token-in/token-out), so
setting it there is what changes what the model sees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyrl_train.models.tokenizer import CHAT_TEMPLATE

QWEN3_WITHOUT_THINKING = (
    "{% if tools %}<|im_start|>system\n"
    'You can call these tools with <tool_call>{"name": ..., "arguments": {...}}</tool_call>:'
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% set content = message['content'] %}"
    "{% if message['role'] == 'assistant' and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip('\\n') %}{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ content }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML that drops the `<think>...</think>` part of every assistant message, so earlier turns' reasoning does not
fill the context of later turns (the behaviour Qwen3's own template has for history)."""

BUILTIN_CHAT_TEMPLATES: dict[str, str] = {"chatml": CHAT_TEMPLATE, "qwen3_without_thinking": QWEN3_WITHOUT_THINKING}
"""Templates selectable with `generator.chat_template.source=name`."""


def resolve_chat_template(source: str, name_or_path: str | None) -> str | None:
    """The template text `generator.chat_template` asks for, or None to keep the tokenizer's own."""
    if name_or_path is None:
        return None
    if source == "name":
        if name_or_path not in BUILTIN_CHAT_TEMPLATES:
            raise ValueError(
                f"generator.chat_template.name_or_path: unknown template name '{name_or_path}'; built-in names are "
                f"{sorted(BUILTIN_CHAT_TEMPLATES)} (or set source=file and give a Jinja file)"
            )
        return BUILTIN_CHAT_TEMPLATES[name_or_path]
    if source == "file":
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"generator.chat_template.name_or_path: no Jinja template file at '{path}'")
        return path.read_text(encoding="utf-8")
    raise ValueError(f"generator.chat_template.source must be 'name' or 'file', got '{source}'")


def apply_chat_template_config(tokenizer: Any, chat_template: Any) -> Any:
    """Set `tokenizer.chat_template` from a `ChatTemplateConfig` (unchanged when it names none); returns it."""
    template = resolve_chat_template(chat_template.source, chat_template.name_or_path)
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer
