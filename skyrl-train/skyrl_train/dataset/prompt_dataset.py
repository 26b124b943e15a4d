"""`PromptDataset`: checked prompt rows from dataset files, with prompts too long for the model filtered out."""

from __future__ import annotations

import copy
import logging
from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional, TypedDict, Union

from skyrl_train.dataset.loading import DataPath, load_files
from skyrl_train.dataset.schema import validate_row
from skyrl_train.dataset.templating import prompt_token_ids_batch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

LENGTH_CHUNK_SIZE = 512
"""Prompts tokenized per batched tokenizer call when measuring lengths."""
KEPT_PROMPT_TOKENS = 2_000_000
"""Most chat-templated prompt tokens a dataset keeps from its length check for the generator (16 MB; the generator's
`PromptIdsCache` holds as many)."""


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


def template_prompts(
    prompts: list[list[dict[str, str]]],
    tokenizer: PreTrainedTokenizerBase,
    chat_template_kwargs: Optional[dict[str, Any]] = None,
) -> list[list[int]]:
    """Token ids of each prompt after the chat template with the generation prompt (what the engine receives), in
    batched tokenizer calls of `LENGTH_CHUNK_SIZE` prompts (`templating.prompt_token_ids_batch`)."""
    ids: list[list[int]] = []
    for start in range(0, len(prompts), LENGTH_CHUNK_SIZE):
        chunk = [(messages, None) for messages in prompts[start : start + LENGTH_CHUNK_SIZE]]
        try:
            ids.extend(prompt_token_ids_batch(tokenizer, chunk, chat_template_kwargs))
        except ValueError as exc:
            raise ValueError(f"PromptDataset needs a tokenizer with a chat template to measure prompts: {exc}") from exc
    return ids


def measure_prompt_lengths(
    prompts: list[list[dict[str, str]]],
    tokenizer: PreTrainedTokenizerBase,
    chat_template_kwargs: Optional[dict[str, Any]] = None,
) -> list[int]:
    """Token count of each prompt after the chat template with the generation prompt (what the engine receives)."""
    return [len(ids) for ids in template_prompts(prompts, tokenizer, chat_template_kwargs)]


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

        templated = template_prompts([row[prompt_key] for row in rows], tokenizer, chat_template_kwargs)
        lengths = [len(ids) for ids in templated]
        keep = [index for index, length in enumerate(lengths) if length <= max_prompt_length]
        self.num_too_long = len(rows) - len(keep)
        if self.num_too_long:
            self._report_too_long(rows, uids, lengths)
        self._rows = [rows[index] for index in keep]
        self._uids = [uids[index] for index in keep]
        self.prompt_lengths = [lengths[index] for index in keep]
        """Token length of each kept prompt (chat template and generation prompt included)."""
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._templated: list[Optional[array]] = []
        budget = KEPT_PROMPT_TOKENS
        for index in keep:  # the ids the length check computed, kept (up to a budget) for the generator
            ids = templated[index]
            budget -= len(ids)
            self._templated.append(array("l", ids) if budget >= 0 else None)

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

    def templated_prompts(self) -> Iterator[tuple[list[dict[str, str]], list[int]]]:
        """`(messages, chat-templated ids)` of the kept prompts whose ids the length check kept (`KEPT_PROMPT_TOKENS`):
        computed with this dataset's tokenizer and `chat_template_kwargs`, as the generator computes them, so a
        generator using the same two need not template these prompts again (`SkyRLGymGenerator.remember_prompt_ids`)."""
        for row, ids in zip(self._rows, self._templated, strict=True):
            if ids is not None:
                yield row[self.prompt_key], ids.tolist()

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
