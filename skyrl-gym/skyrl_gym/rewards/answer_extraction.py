"""Find the final answer in a math response: the last `\\boxed{...}` / `\\fbox{...}`, else the last `Answer:` line.

Every scan is bounded so adversarial text cannot make extraction slow: only the last `MAX_SCAN_CHARS` characters
are searched, an answer longer than `MAX_ANSWER_CHARS` or nested deeper than `MAX_BRACE_DEPTH` is rejected, and at
most `MAX_BOXED_CANDIDATES` `\\boxed` occurrences are tried from the end.
"""

from __future__ import annotations

import re
from typing import Optional

MAX_SCAN_CHARS = 20_000
MAX_ANSWER_CHARS = 1_000
MAX_BRACE_DEPTH = 32
MAX_BOXED_CANDIDATES = 64

END_OF_TURN_MARKERS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<end_of_turn>",
    "<|eos|>",
    "<eos>",
    "</s>",
    "<｜end▁of▁sentence｜>",
)
"""End-of-turn / end-of-sequence strings of common chat templates; every env removes them before reading an answer."""

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_LINE = re.compile(r"answer\s*[:：]\s*([^\n]*)", re.IGNORECASE)


def strip_end_markers(text: str) -> str:
    """Remove trailing whitespace and end-of-turn markers (`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, ...).

    Only the last `2 * MAX_SCAN_CHARS` characters and at most 64 markers are looked at, so this stays cheap.
    """
    window_start = max(0, len(text) - 2 * MAX_SCAN_CHARS)
    window = text[window_start:]
    end = len(window.rstrip())
    for _ in range(64):
        marker = next((m for m in END_OF_TURN_MARKERS if window.endswith(m, 0, end)), None)
        if marker is None:
            break
        end = len(window[: end - len(marker)].rstrip())
    return text[: window_start + end]


def _braced_content(text: str, open_index: int) -> Optional[str]:
    """The content of the brace group opening at `text[open_index] == "{"`, or None if unbalanced or too big."""
    depth = 0
    end_limit = min(len(text), open_index + MAX_ANSWER_CHARS + 2)
    index = open_index
    while index < end_limit:
        char = text[index]
        if char == "\\" and index + 1 < end_limit:  # an escaped brace such as \{ does not open or close a group
            index += 2
            continue
        if char == "{":
            depth += 1
            if depth > MAX_BRACE_DEPTH:
                return None
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
        index += 1
    return None


def _box_argument(text: str, command_end: int) -> Optional[str]:
    """The argument of a box command ending at `command_end`: `{...}` with nesting, or one bare token (`\\boxed 5`)."""
    index = command_end
    while index < len(text) and text[index] in " \t":
        index += 1
    if index >= len(text):
        return None
    if text[index] == "{":
        return _braced_content(text, index)
    if (index == command_end and text[index].isalpha()) or text[index] in "\\$}":
        return None  # "\boxedx" is another command name; "\boxed $" is not an argument
    token = re.match(rf"[^\s$}}]{{1,{MAX_ANSWER_CHARS}}}", text[index : index + MAX_ANSWER_CHARS + 1])
    return token.group(0) if token else None


def extract_boxed_answer(text: str) -> Optional[str]:
    """The stripped content of the last well-formed `\\boxed{...}` or `\\fbox{...}` (nested braces allowed)."""
    tail = text[-MAX_SCAN_CHARS:]
    search_end = len(tail)
    for _ in range(MAX_BOXED_CANDIDATES):
        starts = [(tail.rfind(command, 0, search_end), command) for command in _BOX_COMMANDS]
        start, command = max(starts)
        if start < 0:
            return None
        content = _box_argument(tail, start + len(command))
        if content is not None and content.strip():
            return content.strip()
        search_end = start
    return None


def _clean_answer_line(line: str) -> str:
    """Strip markdown emphasis, math delimiters and a final full stop from an `Answer:` line's text."""
    cleaned = line.strip()
    for _ in range(4):
        before = cleaned
        cleaned = cleaned.strip().strip("*").strip()
        for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if cleaned.startswith(opener) and cleaned.endswith(closer) and len(cleaned) >= len(opener) + len(closer):
                cleaned = cleaned[len(opener) : len(cleaned) - len(closer)]
        cleaned = cleaned.strip()
        if cleaned.endswith("."):
            cleaned = cleaned[:-1]
        if cleaned == before:
            break
    return cleaned.strip()


def extract_answer_line(text: str) -> Optional[str]:
    """The text after the last `Answer:` (case-insensitive, e.g. "Final Answer: $42$" -> "42"); None if absent."""
    tail = text[-MAX_SCAN_CHARS:]
    last = None
    for match in _ANSWER_LINE.finditer(tail):
        last = match
    if last is None:
        return None
    answer = _clean_answer_line(last.group(1))
    if not answer or len(answer) > MAX_ANSWER_CHARS:
        return None
    return answer


def extract_final_answer(response: str) -> Optional[str]:
    """The final answer of a math response: the last `\\boxed{}`/`\\fbox{}`, else the last `Answer:` line.

    End-of-turn markers at the end of the response are removed first. Returns None when there is no answer.
    """
    text = strip_end_markers(response)
    boxed = extract_boxed_answer(text)
    if boxed is not None:
        return boxed
    return extract_answer_line(text)
