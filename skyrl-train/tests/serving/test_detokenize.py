"""Incremental detokenisation of streamed responses: the pieces join to the engine's text, special tokens add nothing,
multi-byte characters split over byte tokens come out whole, and no decode call sees more than a bounded window."""

import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.serving.detokenize import MAX_PENDING_TOKENS, stream_pieces


class CountingTokenizer:
    """The wrapped tokenizer, recording how many ids each `decode` call got."""

    def __init__(self, inner):
        self.inner = inner
        self.sizes: list[int] = []

    def decode(self, ids, **kwargs):
        self.sizes.append(len(ids))
        return self.inner.decode(ids, **kwargs)


def _byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte (GPT-2's byte-to-unicode alphabet, no merges): a multi-byte character spans several tokens,
    and decoding only some of them gives U+FFFD."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


def test_special_tokens_add_nothing_to_the_stream():
    """A special token sampled mid-response (the tiny model samples any id) adds no text, so the pieces still join to
    the engine's text (decoded with `skip_special_tokens=True`)."""
    tokenizer = build_char_tokenizer()
    special = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ids = [special, *tokenizer.encode("Yf", add_special_tokens=False), special, *tokenizer.encode("B")]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert text == "YfB" and stream_pieces(tokenizer, ids, text) == ["", "Y", "f", "", "B"]


def test_multi_byte_characters_come_out_whole():
    tokenizer = _byte_level_tokenizer()
    text = "héllo 😀 wörld"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.encode())  # one token per byte
    pieces = stream_pieces(tokenizer, ids, text)
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces)
    assert "😀" in pieces  # the emoji's four byte tokens: three empty pieces, then the whole character
    emoji_at = pieces.index("😀")
    assert pieces[emoji_at - 3 : emoji_at] == ["", "", ""]


def test_a_cut_stop_string_is_not_streamed():
    """The engine's text ends before a matched stop string: the pieces stop there too."""
    tokenizer = build_char_tokenizer()
    ids = tokenizer.encode("12+34=46\nnext", add_special_tokens=False)
    pieces = stream_pieces(tokenizer, ids, "12+34=46")
    assert "".join(pieces) == "12+34=46" and len(pieces) == len(ids)
    assert pieces[8:] == [""] * (len(ids) - 8)


@pytest.mark.parametrize("length", [50, 2000])
def test_every_decode_call_sees_a_bounded_window(length):
    """The old stream decoded `ids[:end]` for every `end` (n^2 / 2 ids in all); now no call sees more than
    2 * MAX_PENDING_TOKENS ids, long runs of special tokens included, and the pieces still join to the text."""
    inner = build_char_tokenizer()
    special = inner.convert_tokens_to_ids("<|endoftext|>")
    generator = random.Random(length)
    ids = [generator.randrange(len(inner)) for _ in range(length)]
    ids[10:40] = [special] * 30  # a long run that adds no text
    text = inner.decode(ids, skip_special_tokens=True)
    tokenizer = CountingTokenizer(inner)
    pieces = stream_pieces(tokenizer, ids, text)
    assert "".join(pieces) == text and len(pieces) == len(ids)
    assert max(tokenizer.sizes) <= 2 * MAX_PENDING_TOKENS
    assert sum(tokenizer.sizes) <= 4 * MAX_PENDING_TOKENS * length  # linear in the response length
