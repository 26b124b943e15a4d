"""Shared fixtures: the project's char tokenizer (ChatML template with tools)."""

from __future__ import annotations

import os

import pytest

from skyrl_train.models.tokenizer import build_char_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TINKER_TELEMETRY", "0")


@pytest.fixture(scope="session")
def tokenizer():
    """The project's char-level tokenizer with its ChatML template."""
    return build_char_tokenizer()
