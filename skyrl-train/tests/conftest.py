"""Test-wide settings for skyrl-train: no hub access, one torch thread per process on the 2-core CI machine."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

torch.set_num_threads(1)
