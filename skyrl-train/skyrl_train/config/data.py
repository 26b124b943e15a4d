"""The `data` section: which prompt datasets to read and how to load them."""

from dataclasses import dataclass, field


@dataclass
class DataConfig:
    """Prompt datasets for training and evaluation, and how the dataloader reads them."""

    train_data: list[str] = field(default_factory=lambda: ["~/data/gsm8k/train.parquet"])
    """Training datasets: local paths or fsspec URLs (`s3://`, `gs://`, ...) to parquet, json or jsonl files. Several
    files are concatenated. On the command line quote paths that start with `~`: `data.train_data="['~/a.parquet']"`."""

    val_data: list[str] = field(default_factory=lambda: ["~/data/gsm8k/validation.parquet"])
    """Evaluation datasets (same formats as `train_data`). Metrics are reported per `data_source` and over all of them;
    an empty list disables evaluation."""

    max_prompt_length: int = 512
    """Prompts longer than this many tokens (after the chat template) are dropped from the dataset, not truncated."""

    prompt_key: str = "prompt"
    """Column holding the prompt as a list of chat messages (`[{role, content}, ...]`)."""

    env_class_key: str = "env_class"
    """Column naming the skyrl-gym environment of each row; rows without it use `environment.env_class`."""

    shuffle: bool = True
    """Shuffle the training prompts every epoch (evaluation data is never shuffled)."""

    seed: int = 42
    """Seed of the training-data shuffle, so a resumed run sees the same order."""

    num_workers: int = 0
    """Worker processes for loading data. Today prompts are loaded and length-filtered in the driver process."""
