"""Tests for the cached embedded model: cache location and key, atomic build, reuse, determinism, damage repair."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.recipes import embedded
from skyrl_train.recipes.embedded import (
    DESCRIPTION_FILE,
    REQUIRED_FILES,
    cache_key,
    cache_problem,
    embedded_model_dir,
    get_embedded_model,
    load_embedded_model,
    read_description,
)
from skyrl_train.recipes.warm_start import WarmStartSettings

torch.set_num_threads(1)

TINY = WarmStartSettings(
    size=1, train_examples=32, eval_examples=4, max_steps=3, batch_size=8, eval_every=3, sample_prompts=2, sample_n=2
)


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory):
    """One build of TINY shared by the tests (each gets its own copy through `built`)."""
    root = tmp_path_factory.mktemp("prebuilt")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SKYRL_CACHE", str(root))
        get_embedded_model(TINY, progress=False)
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty SKYRL_CACHE for this test."""
    monkeypatch.setenv("SKYRL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def built(cache, prebuilt):
    """A SKYRL_CACHE holding a copy of the prebuilt TINY entry; returns the entry's folder."""
    shutil.copytree(prebuilt, cache)
    return embedded_model_dir(TINY)


def _forbid_builds(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the cached model should have been reused")

    monkeypatch.setattr(embedded, "warm_start", refuse)


def test_cache_root_defaults_to_home_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("SKYRL_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert embedded.cache_root() == tmp_path / ".cache" / "skyrl"


def test_cache_key_depends_on_settings_and_code_version(cache, monkeypatch):
    key = cache_key(TINY)
    assert len(key) == 16 and key == cache_key(WarmStartSettings(**TINY.to_dict()))
    assert cache_key(WarmStartSettings(**{**TINY.to_dict(), "seed": 1})) != key
    assert embedded_model_dir(TINY) == cache / "embedded" / key
    monkeypatch.setattr(embedded, "CODE_VERSION", "test-bump")
    assert cache_key(TINY) != key


def test_build_writes_a_loadable_folder_with_its_description(built, monkeypatch):
    _forbid_builds(monkeypatch)
    path = get_embedded_model(TINY, progress=False)
    assert path == built
    assert all((path / name).is_file() for name in REQUIRED_FILES)
    description = read_description(path)
    assert description["settings"] == TINY.to_dict() and description["cache_key"] == cache_key(TINY)
    assert description["warm_start"]["steps"] == 3
    assert 0.0 <= description["accuracy"]["greedy"] <= 1.0
    assert description["accuracy"]["sampled"]["n"] == 2
    assert description["model"]["num_parameters"] > 0
    model, tokenizer = load_embedded_model(path)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 1
    weights = load_file(path / "model.safetensors")
    assert all(torch.equal(model.state_dict()[name], value) for name, value in weights.items())
    assert tokenizer.eos_token_id == 4 and tokenizer.pad_token_id == 0 and tokenizer.padding_side == "left"


def test_the_loaded_tokenizer_encodes_chat_prompts_like_the_training_one(built):
    _, tokenizer = load_embedded_model(built)
    messages = [{"role": "user", "content": "Use 3 7 to make 10"}]  # spaces and the template's newlines matter
    expected = build_char_tokenizer().apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    loaded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    assert loaded["input_ids"] == expected["input_ids"]


def test_generic_load_tokenizer_reads_the_embedded_tokenizer_faithfully(built):
    from skyrl_train.models.loading import load_tokenizer

    text = "a b\nc"
    expected = build_char_tokenizer().encode(text, add_special_tokens=False)  # 5 ids: a, space, b, newline, c
    assert load_tokenizer(str(built)).encode(text, add_special_tokens=False) == expected


def test_a_valid_entry_is_reused_without_training(built, monkeypatch):
    _forbid_builds(monkeypatch)
    assert get_embedded_model(TINY, progress=False) == built
    assert get_embedded_model(TINY, progress=False) == built


def test_rebuild_trains_afresh_even_when_the_entry_is_valid(built, monkeypatch):
    calls = []
    original = embedded.warm_start
    monkeypatch.setattr(embedded, "warm_start", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    assert get_embedded_model(TINY, progress=False, rebuild=True) == built
    assert calls == [1] and cache_problem(built, TINY) is None


def test_same_settings_rebuild_the_same_weights(cache, prebuilt):
    first = load_file(prebuilt / "embedded" / cache_key(TINY) / "model.safetensors")
    path = get_embedded_model(TINY, progress=False)
    assert [p.name for p in path.parent.iterdir() if not p.name.endswith(".lock")] == [path.name]  # no staging left
    second = load_file(path / "model.safetensors")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


@pytest.mark.parametrize(
    "damage", ["delete_weights", "delete_description", "delete_chat_template", "tamper_weights", "other_settings"]
)
def test_a_damaged_entry_is_detected_and_rebuilt(built, damage):
    path = built
    original = (path / "model.safetensors").read_bytes()
    if damage == "delete_weights":
        (path / "model.safetensors").unlink()
    elif damage == "delete_description":
        (path / DESCRIPTION_FILE).unlink()
    elif damage == "delete_chat_template":  # not in REQUIRED_FILES, but recorded in the description's file list
        (path / "chat_template.jinja").unlink()
    elif damage == "tamper_weights":
        (path / "model.safetensors").write_bytes(original[:-8] + b"\x00" * 8)
    else:
        description = read_description(path)
        description["settings"]["seed"] = 99
        (path / DESCRIPTION_FILE).write_text(json.dumps(description))
    assert cache_problem(path, TINY) is not None
    assert get_embedded_model(TINY, progress=False) == path
    assert cache_problem(path, TINY) is None
    assert (path / "model.safetensors").read_bytes() == original  # rebuilt deterministically


def test_cache_problem_names_the_missing_file(built):
    path = built
    (path / "tokenizer.json").unlink()
    assert cache_problem(path, TINY) == "missing tokenizer.json"
    assert cache_problem(path.parent / "nowhere", TINY) == "not built"


def test_a_failed_build_leaves_nothing_behind(cache, monkeypatch):
    def fail(*args, **kwargs):  # the weights are already in the staging folder when this runs
        raise OSError("disk full")

    monkeypatch.setattr(embedded, "save_tokenizer", fail)
    with pytest.raises(OSError, match="disk full"):
        get_embedded_model(TINY, progress=False)
    leftovers = [p.name for p in (cache / "embedded").iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []
