"""Pull the program out of a model response: the last fenced ```python (or untagged) code block."""

from __future__ import annotations

import re
from typing import Optional

# A fence opens with ``` and an optional language tag, ends its line, and closes with ``` at the start of a line.
_FENCED_BLOCK = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
PYTHON_TAGS = frozenset({"", "python", "python3", "py", "py3"})


def extract_code_block(response: str) -> Optional[str]:
    """Return the body of the last non-empty ```python / ```py / untagged fenced block, or None when there is none.

    Blocks tagged with another language (```cpp, ```text) are skipped; an unterminated fence does not count.
    """
    last = None
    for match in _FENCED_BLOCK.finditer(response):
        if match.group(1).lower() in PYTHON_TAGS and match.group(2).strip():
            last = match.group(2)
    return last
