"""The limits: one `skyrl-tx serve` flag per budget and quota, read back into `Limits`, refused when not positive;
metadata, LoRA and batch checks name the field and the flag. (Each limit's effect on requests: test_app.py.)"""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from skyrl_tx.futures import UserError
from skyrl_tx.limits import Limits
from skyrl_tx.wire import TrainDatum


def test_every_limit_has_a_flag_with_its_docstring_and_the_flags_set_it():
    parser = argparse.ArgumentParser()
    Limits.add_flags(parser)
    names = [item.name for item in fields(Limits)]
    assert sorted(Limits.FLAGS) == sorted(names)
    assert Limits.from_args(parser.parse_args([])) == Limits()
    argv = []
    for item in fields(Limits):
        argv += [Limits.FLAGS[item.name], str(item.default * 2 if item.name != "max_lora_rank" else 8)]
    limits = Limits.from_args(parser.parse_args(argv))
    for item in fields(Limits):
        expected = 8 if item.name == "max_lora_rank" else item.default * 2
        assert getattr(limits, item.name) == expected, item.name
    help_text = parser.format_help()
    assert "Padded tokens of one forward_backward" in help_text and "(default 131072)" in help_text


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--max-datums", "0"], "--max-datums must be > 0, got 0"),
        (["--max-checkpoint-gb-per-key", "-1"], "--max-checkpoint-gb-per-key must be > 0"),
        (["--max-lora-rank", "1024"], "--max-lora-rank must be at most 512"),
    ],
)
def test_limits_that_cannot_work_are_refused_naming_the_flag(argv, message):
    parser = argparse.ArgumentParser()
    Limits.add_flags(parser)
    with pytest.raises(SystemExit, match=message):
        Limits.from_args(parser.parse_args(argv))


def test_metadata_must_be_small_strings_and_is_stored_as_strings():
    limits = Limits(max_metadata_bytes=64)
    assert limits.check_metadata({"tags": ["a"], "user_metadata": {"n": 1}}) == (["a"], {"n": "1"})
    assert limits.check_metadata({}) == ([], {})
    for body, message in (
        ({"tags": "abc"}, "tags must be a list of strings"),
        ({"user_metadata": [1]}, "user_metadata must be an object"),
        ({"user_metadata": {"x": "y" * 100}}, r"user_metadata is 109 bytes of JSON; .* at most 64 \(--max-metadata"),
        ({"tags": ["t"] * 30}, r"tags is \d+ bytes of JSON"),
    ):
        with pytest.raises(UserError, match=message):
            limits.check_metadata(body)


def test_lora_configs_are_checked_field_by_field():
    limits = Limits(max_lora_rank=16)
    spec = limits.lora_spec({"rank": 8, "seed": 3, "train_unembed": False})
    assert (spec.rank, spec.seed, spec.train_unembed, spec.train_mlp) == (8, 3, False, True)
    assert Limits().lora_spec(None).rank == 32  # Tinker's default rank
    for lora, message in (
        ({"rank": 17}, r"rank must be in \[1, 16\] \(--max-lora-rank\), got 17"),
        ({"rank": 0}, r"rank must be in \[1, 16\]"),
        ({"rank": True}, "rank must be an integer"),
        ({"rank": 4, "seed": -1}, r"seed must be in \[0, 2\^63\)"),
        ({"rank": 4, "train_mlp": "yes"}, "train_mlp must be true or false"),
        ([4], "lora_config must be an object"),
    ):
        with pytest.raises(UserError, match=message):
            limits.lora_spec(lora)


def test_a_batch_is_measured_padded():
    limits = Limits(max_datums=3, max_batch_tokens=20)
    datum = lambda n: TrainDatum(tokens=list(range(n)))  # noqa: E731
    limits.check_batch([datum(10), datum(10)], max_context=512)
    with pytest.raises(UserError, match=r"3 datums x 10 tokens \(the longest\) = 30 padded tokens"):
        limits.check_batch([datum(1), datum(1), datum(10)], max_context=512)
    with pytest.raises(UserError, match=r"4 datums; this server takes at most 3"):
        limits.check_batch([datum(1)] * 4, max_context=512)
    with pytest.raises(UserError, match="a datum has 10 tokens; the model takes at most 8"):
        limits.check_batch([datum(10)], max_context=8)
    with pytest.raises(UserError, match="data is empty"):
        limits.check_batch([], max_context=8)
