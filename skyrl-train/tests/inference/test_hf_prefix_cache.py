"""The hf engine's prefix cache: a session's next turn prefills only its new tokens, and what it returns is what a
full forward of the whole conversation gives (tokens and logprobs); weight updates, resets and the off switch drop or
skip the kept keys and values."""

import asyncio

import pytest
import torch

from skyrl_train.inference.client import prefix_cache_metrics
from skyrl_train.inference.engine_builders import EngineSettings, build_hf_engine
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.hf_prefix_cache import CachedPrefix, PrefixCache, common_prefix_length
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

LOGPROB_TOLERANCE = 1e-5  # fp32: kept keys/values from decode steps vs one full forward pass, summation order only
GREEDY = SamplingParams(max_tokens=6, temperature=0)


@pytest.fixture
def model():
    return build_tiny_model(TinyModelSpec(size=2), seed=0)


def _chat(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)


def _generate(engine, prompts, sessions=None, params=GREEDY):
    request = InferenceEngineInput(prompt_token_ids=prompts, sampling_params=params, session_ids=sessions)
    return asyncio.run(engine.generate(request))


def _two_turns(engine, tokenizer, follow_up=lambda prompt, response, index: prompt + response + [5, 6, 7][: index + 1]):
    """Turn 1 for sessions a, b, c; turn 2 for a and b (conversation so far + new tokens) with a new session d."""
    first = [_chat(tokenizer, text) for text in ("What is 2+3?", "Add 11 and 40.", "1+1")]
    out = _generate(engine, first, ["a", "b", "c"])
    second = [follow_up(first[i], out.response_ids[i], i) for i in range(2)] + [_chat(tokenizer, "What is 9+9?")]
    return first, out, second, _generate(engine, second, ["a", "b", "d"])


def _check_against_full_forward(model, prompts, output, max_logprob_error, is_greedy):
    assert max_logprob_error(model, prompts, output, 1, 1.0) < LOGPROB_TOLERANCE
    for prompt, response in zip(prompts, output.response_ids):
        assert is_greedy(model, prompt, response)


def test_a_sessions_next_turn_prefills_only_its_new_tokens(tokenizer, model, max_logprob_error, is_greedy):
    engine = HFInferenceEngine(model, tokenizer)
    first, out, second, again = _two_turns(engine, tokenizer)
    cache = engine.prefix_cache
    kept = [len(first[i]) + len(out.response_ids[i]) - 1 for i in range(2)]  # the last token was sampled, not fed
    assert (cache.hits, cache.reused_tokens) == (2, sum(kept))
    # turn 1 prefilled every prompt; turn 2 the new tokens of a and b (after what was kept) and all of d's
    turn_two = sum(len(second[i]) - kept[i] for i in range(2)) + len(second[2])
    assert cache.prefilled_tokens == sum(len(p) for p in first) + turn_two
    _check_against_full_forward(model, second, again, max_logprob_error, is_greedy)
    # the same conversation without the cache: the same tokens
    plain = HFInferenceEngine(model, tokenizer, enable_prefix_caching=False)
    assert plain.prefix_cache is None
    assert _two_turns(plain, tokenizer)[3].response_ids == again.response_ids


def test_a_rewritten_history_reuses_only_the_common_prefix(tokenizer, model, max_logprob_error, is_greedy):
    """A re-tokenized history (the generator's `retokenize_chat_history`) may differ from what the engine generated:
    only the tokens both share are reused."""
    engine = HFInferenceEngine(model, tokenizer)
    first, out, second, again = _two_turns(
        engine, tokenizer, lambda prompt, response, index: prompt + response[:2] + [9, 8, 7, 6]
    )
    kept = [first[i] + out.response_ids[i][:-1] for i in (0, 1)]
    shared = [common_prefix_length(second[i], kept[i]) for i in (0, 1)]
    assert all(len(first[i]) + 2 <= shared[i] < len(kept[i]) for i in (0, 1))
    assert engine.prefix_cache.reused_tokens == sum(shared)
    _check_against_full_forward(model, second, again, max_logprob_error, is_greedy)


def test_a_weight_update_drops_the_kept_prefixes(tokenizer, model, max_logprob_error, is_greedy):
    engine = HFInferenceEngine(model, tokenizer)
    prompt = _chat(tokenizer, "What is 2+3?")
    out = _generate(engine, [prompt], ["a"])
    assert len(engine.prefix_cache) == 1
    new = build_tiny_model(TinyModelSpec(size=2), seed=1)
    asyncio.run(engine.update_weights(list(new.state_dict().items()), version=1))
    assert len(engine.prefix_cache) == 0
    follow = prompt + out.response_ids[0] + [5, 6]
    again = _generate(engine, [follow], ["a"])
    assert engine.prefix_cache.hits == 0
    _check_against_full_forward(new, [follow], again, max_logprob_error, is_greedy)
    asyncio.run(engine.reset_prefix_cache())
    assert len(engine.prefix_cache) == 0


def test_calls_without_session_ids_keep_nothing(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    _generate(engine, [_chat(tokenizer, "What is 2+3?")])
    assert len(engine.prefix_cache) == 0


def test_the_config_switch_reaches_the_hf_engine(tmp_path, tokenizer, model):
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    on = build_hf_engine(EngineSettings(model_path=str(tmp_path), dtype="float32"))
    off = build_hf_engine(EngineSettings(model_path=str(tmp_path), dtype="float32", enable_prefix_caching=False))
    assert isinstance(on.prefix_cache, PrefixCache) and off.prefix_cache is None
    sized = build_hf_engine(
        EngineSettings(model_path=str(tmp_path), dtype="float32", engine_kwargs={"prefix_cache_bytes": 4096})
    )
    assert sized.prefix_cache.max_bytes == 4096


def _entry(length: int, version: int = 0) -> CachedPrefix:
    return CachedPrefix(list(range(length)), [torch.zeros(1, length, 2)], [torch.zeros(1, length, 2)], version)


def test_the_cache_takes_matching_entries_once_and_drops_the_oldest_past_its_bytes():
    cache = PrefixCache(max_bytes=_entry(10).nbytes * 2)
    cache.put("a", _entry(10))
    assert cache.take("a", list(range(4)) + [99], version=1) is None  # another version: never reused
    cache.put("a", _entry(10))
    entry, reuse = cache.take("a", list(range(4)) + [99], version=0)
    assert reuse == 4 and "a" not in cache.entries
    cache.put("a", _entry(10))
    assert cache.take("a", list(range(10)), version=0)[1] == 9  # the last prompt token is always run
    for name in "bcd":
        cache.put(name, _entry(10))
    assert list(cache.entries) == ["c", "d"] and cache.nbytes == 2 * _entry(10).nbytes
    cache.put("e", _entry(30))  # larger than the whole budget: not kept
    assert "e" not in cache.entries
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(max_bytes=-1)


def test_counts_are_taken_once_and_engines_without_a_cache_report_none(tokenizer, model):
    engine = HFInferenceEngine(model, tokenizer)
    _two_turns(engine, tokenizer)
    counts = asyncio.run(engine.take_cache_counts())
    assert (counts["hits"], counts["misses"]) == (2, 4)  # turn 2 of a and b; turn 1 of a, b, c and d's only turn
    assert asyncio.run(engine.take_cache_counts()) == dict.fromkeys(counts, 0)
    off = HFInferenceEngine(model, tokenizer, enable_prefix_caching=False)
    assert asyncio.run(off.take_cache_counts()) == {}
    assert asyncio.run(prefix_cache_metrics([off])) == {}


def test_weights_changed_in_place_drop_the_kept_prefixes(tokenizer, model, max_logprob_error, is_greedy):
    """A caller that trains the engine's own model object (no `update_weights`, no new version): the next turn must
    not reuse keys and values of the old weights."""
    engine = HFInferenceEngine(model, tokenizer)
    prompt = _chat(tokenizer, "What is 2+3?")
    out = _generate(engine, [prompt], ["a"])
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.5)  # what an optimizer step does: write the weights in place
    follow = prompt + out.response_ids[0] + [5, 6]
    again = _generate(engine, [follow], ["a"])
    assert engine.prefix_cache.hits == 0
    _check_against_full_forward(model, [follow], again, max_logprob_error, is_greedy)


def test_kept_prefixes_hold_their_own_bytes_only(tokenizer, model):
    """An entry's keys and values must own storage of exactly their size: a view into the batch's cache would keep
    the whole batch alive while `nbytes` (what the byte cap counts) saw only the slice."""
    engine = HFInferenceEngine(model, tokenizer)
    prompts = [_chat(tokenizer, text) for text in ("What is 2+3?", "Add 11 and 40.", "1+1")]
    _generate(engine, prompts, ["a", "b", "c"])
    entries = list(engine.prefix_cache.entries.values())
    assert len(entries) == 3
    for entry in entries:
        tensors = [*entry.keys, *entry.values]
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == len(tensors)
        assert sum(t.untyped_storage().nbytes() for t in tensors) == entry.nbytes
