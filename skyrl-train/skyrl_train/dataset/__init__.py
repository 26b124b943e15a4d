"""Prompt datasets: reading parquet/jsonl/json files, checking rows against the contract, a resumable dataloader."""

from skyrl_train.dataset.dataloader import StatefulDataLoader, epoch_permutation
from skyrl_train.dataset.loading import (
    READERS,
    DataPath,
    DatasetFileError,
    LoadedFile,
    load_files,
    read_file,
    register_reader,
    to_python,
)
from skyrl_train.dataset.prompt_dataset import PromptDataset, PromptItem, measure_prompt_lengths
from skyrl_train.dataset.schema import (
    ALLOWED_ROLES,
    DEFAULT_DATA_SOURCE,
    REWARD_METHODS,
    DatasetSchemaError,
    validate_row,
)

__all__ = [
    "ALLOWED_ROLES",
    "DEFAULT_DATA_SOURCE",
    "READERS",
    "REWARD_METHODS",
    "DataPath",
    "DatasetFileError",
    "DatasetSchemaError",
    "LoadedFile",
    "PromptDataset",
    "PromptItem",
    "StatefulDataLoader",
    "epoch_permutation",
    "load_files",
    "measure_prompt_lengths",
    "read_file",
    "register_reader",
    "to_python",
    "validate_row",
]
