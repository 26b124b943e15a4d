"""`PromptDataset`: checked prompt rows from dataset files, with prompts too long for the model filtered out."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Optional, TypedDict, Union

from skyrl_train.dataset.loading import DataPath, load_files
from skyrl_train.dataset.schema import validate_row

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

LENGTH_CHUNK_SIZE = 512
"""Prompts tokenized per batched tokenizer call when measuring lengths."""


class PromptItem(TypedDict):
    """One prompt as the generator receives it."""

    prompt: list[dict[str, str]]
    """The chat messages, `[{role, content}, ...]`."""
    env_class: str
    """Registered skyrl-gym env id that plays this prompt."""
    env_extras: dict[str, Any]
    """Every other column of the row (`data_source`, `reward_spec`, `extra_info`, custom ones): the env's extras."""
    uid: str
    """Stable id of the prompt, `"<file index>:<row index in that file>"`; samples of one prompt share it."""


def measure_prompt_lengths(
    prompts: list[list[dict[str, str]]],
    tokenizer: PreTrainedTokenizerBase,
    chat_template_kwargs: Optional[dict[str, Any]] = None,
) -> list[int]:
    """Token count of each prompt after the chat template with the generation prompt (what the engine receives)."""
    kwargs = chat_template_kwargs or {}
    lengths: list[int] = []
    for start in range(0, len(prompts), LENGTH_CHUNK_SIZE):
        chunk = prompts[start : start + LENGTH_CHUNK_SIZE]
        try:
            texts = [
                tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
                for messages in chunk
            ]
        except ValueError as exc:
            raise ValueError(f"PromptDataset needs a tokenizer with a chat template to measure prompts: {exc}") from exc
        # the rendered template already holds its special tokens, so none are added here
        encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
        lengths.extend(len(ids) for ids in encoded)
    return lengths


class PromptDataset:
    """Prompts read from parquet/jsonl/json files or fsspec URLs, checked against the row contract.

    Rows are validated when loaded (see `schema.validate_row`; `default_env_class` fills a missing env class; a
    `reward_spec.method` in `unsupported_reward_methods` is refused, naming the row and what to change).
    Prompts whose chat-templated length (with the generation prompt) exceeds `max_prompt_length` tokens are dropped,
    never truncated; `num_too_long` counts them and a warning names an example. Items are `PromptItem` dicts, deep
    copies, so an env may change its prompt or extras without touching the dataset.
    """

    def __init__(
        self,
        files: Union[DataPath, Iterable[DataPath]],
        tokenizer: PreTrainedTokenizerBase,
        max_prompt_length: int,
        default_env_class: Optional[str] = None,
        prompt_key: str = "prompt",
        env_class_key: str = "env_class",
        chat_template_kwargs: Optional[dict[str, Any]] = None,
        unsupported_reward_methods: Optional[Mapping[str, str]] = None,
    ) -> None:
        if isinstance(max_prompt_length, bool) or not isinstance(max_prompt_length, int) or max_prompt_length <= 0:
            raise ValueError(f"max_prompt_length must be a positive integer, got {max_prompt_length!r}")
        self.max_prompt_length = max_prompt_length
        self.prompt_key = prompt_key
        self.env_class_key = env_class_key

        loaded = load_files(files)
        self.files = [entry.path for entry in loaded]
        rows: list[dict[str, Any]] = []
        uids: list[str] = []
        for file_index, entry in enumerate(loaded):
            for row_index, row in enumerate(entry.rows):
                rows.append(
                    validate_row(
                        row,
                        source=entry.path,
                        index=row_index,
                        default_env_class=default_env_class,
                        prompt_key=prompt_key,
                        env_class_key=env_class_key,
                        unsupported_reward_methods=unsupported_reward_methods,
                    )
                )
                uids.append(f"{file_index}:{row_index}")
        self.num_rows_read = len(rows)

        lengths = measure_prompt_lengths([row[prompt_key] for row in rows], tokenizer, chat_template_kwargs)
        keep = [index for index, length in enumerate(lengths) if length <= max_prompt_length]
        self.num_too_long = len(rows) - len(keep)
        if self.num_too_long:
            self._report_too_long(rows, uids, lengths)
        self._rows = [rows[index] for index in keep]
        self._uids = [uids[index] for index in keep]
        self.prompt_lengths = [lengths[index] for index in keep]
        """Token length of each kept prompt (chat template and generation prompt included)."""

    def _report_too_long(self, rows: list[dict[str, Any]], uids: list[str], lengths: list[int]) -> None:
        first = next(index for index, length in enumerate(lengths) if length > self.max_prompt_length)
        example = (
            f"e.g. data_source {rows[first]['data_source']!r} (uid {uids[first]}, {lengths[first]} tokens, "
            f"longest {max(lengths)})"
        )
        if self.num_too_long == len(rows):
            raise ValueError(
                f"all {len(rows)} prompts of {self.files} are longer than max_prompt_length={self.max_prompt_length} "
                f"tokens; {example}. Raise max_prompt_length or shorten the prompts"
            )
        logger.warning(
            "dropped %d of %d prompts longer than max_prompt_length=%d tokens (they are filtered out, not truncated); %s",
            self.num_too_long,
            len(rows),
            self.max_prompt_length,
            example,
        )

    def env_class_uses(self) -> dict[str, tuple[int, str]]:
        """Each env class the kept rows name -> (how many rows, the uid of the first one)."""
        uses: dict[str, tuple[int, str]] = {}
        for row, uid in zip(self._rows, self._uids, strict=True):
            count, first = uses.get(row[self.env_class_key], (0, uid))
            uses[row[self.env_class_key]] = (count + 1, first)
        return uses

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: int) -> PromptItem:
        row = self._rows[index]
        extras = {key: value for key, value in row.items() if key not in (self.prompt_key, self.env_class_key)}
        return PromptItem(
            prompt=copy.deepcopy(row[self.prompt_key]),
            env_class=row[self.env_class_key],
            env_extras=copy.deepcopy(extras),
            uid=self._uids[index],
        )

    def __repr__(self) -> str:
        return (
            f"PromptDataset({len(self)} prompts from {len(self.files)} file(s), "
            f"{self.num_too_long} dropped as longer than {self.max_prompt_length} tokens)"
        )
