"""Incremental detokenisation for streamed responses: the text each token adds, decoded from a bounded window of ids.

Decoding `ids[:end]` for every `end` costs O(n^2) in the response length (seconds per choice at a few thousand
tokens). Here each step decodes only the ids of the last piece sent (context, so tokenizers that drop a leading space
or merge bytes across tokens give the right difference) plus the ids not shown yet, and a piece is held back while its
text ends in an incomplete character, for at most `MAX_PENDING_TOKENS` ids: every decode call sees at most
`2 * MAX_PENDING_TOKENS` ids, whatever the length of the response.
"""

from __future__ import annotations

import os
from typing import Any

MAX_PENDING_TOKENS = 8
"""Most ids held back while their text is empty or ends in an incomplete character (a byte-level token sequence of
a multi-byte character); then the piece goes out as it is and the end of the stream corrects the text."""


def stream_pieces(tokenizer: Any, token_ids: list[int], text: str) -> list[str]:
    """One piece of text per token, joining to `text` exactly (the engine's text: special tokens skipped, a stop
    string cut off). A piece that disagrees with `text` is cut where it stops agreeing, and whatever is missing at the
    end goes out with the last token."""
    pieces: list[str] = []
    shown = ""
    prefix = read = 0  # ids[prefix:read] made the last piece sent (context); ids[read:] are not shown yet
    before = ""  # decode(ids[prefix:read])
    for end in range(1, len(token_ids) + 1):
        after = tokenizer.decode(token_ids[prefix:end], skip_special_tokens=True)
        complete = len(after) > len(before) and not after.endswith("\ufffd")
        piece = ""
        if complete or end - read >= MAX_PENDING_TOKENS:
            piece = after[len(before) :] if after.startswith(before) else after
            prefix, read = read, end
            before = tokenizer.decode(token_ids[prefix:read], skip_special_tokens=True)
        room = text[len(shown) :]
        piece = piece[: len(os.path.commonprefix([piece, room]))]
        pieces.append(piece)
        shown += piece
    if shown != text:  # `shown` is a prefix of `text`: the rest goes with the last token
        if not pieces:
            return [text]
        pieces[-1] += text[len(shown) :]
    return pieces
