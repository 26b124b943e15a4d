"""The embedded character-level tokenizer with a ChatML-style chat template, built with the `tokenizers` library."""

from __future__ import annotations

import string
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
UNK_TOKEN = "<|unk|>"
EOS_TOKEN = "<|im_end|>"
IM_START_TOKEN = "<|im_start|>"
ENDOFTEXT_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = [PAD_TOKEN, UNK_TOKEN, ENDOFTEXT_TOKEN, IM_START_TOKEN, EOS_TOKEN]

# Printable ASCII plus newline and tab: every synthetic task and chat-template character.
DEFAULT_ALPHABET = "".join(sorted(set(string.printable) - {"\x0b", "\x0c", "\r"}))

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    'You can call these tools with <tool_call>{"name": ..., "arguments": {...}}</tool_call>:'
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET, model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """Build the char-level tokenizer: one id per character of `alphabet`, plus the chat special tokens.

    Ids: the special tokens first (pad=0, unk=1, endoftext=2, im_start=3, im_end=4), then the alphabet in order.
    Characters outside the alphabet map to `<|unk|>`. Decoding concatenates characters back exactly.
    """
    if len(set(alphabet)) != len(alphabet):
        raise ValueError("alphabet has repeated characters; each character must appear once")
    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS)}
    for char in alphabet:
        vocab[char] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        eos_token=EOS_TOKEN,
        bos_token=None,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, directory: str | Path) -> None:
    """Save the tokenizer (files, special tokens, chat template) so `AutoTokenizer.from_pretrained` reloads it."""
    tokenizer.save_pretrained(str(directory))
