"""The engine's CPU attention: grouped-query SDPA without repeated KV heads (the same outputs as transformers' `sdpa`
on masked calls, no copy of the keys and values, every other call left to transformers), and half-precision calls
attended in float32."""

import copy

import pytest
import torch
from transformers.integrations import sdpa_attention

from skyrl_train.models.cpu_attention import CPU_SDPA, cpu_sdpa_attention, use_cpu_sdpa
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model, tiny_model_config

TOLERANCE = 1e-6
"""fp32 attention over <= 12 keys of 32-dim heads: grouped and repeated heads run the same kernel on the same numbers
(they agree bitwise here); the bound only allows a different summation order (about 1e-7 relative)."""


@pytest.fixture
def repeat_calls(monkeypatch) -> list[int]:
    """The group count of every `repeat_kv` call transformers' `sdpa` makes (a spy around the real function)."""
    calls: list[int] = []
    repeat = sdpa_attention.repeat_kv

    def counting_repeat(hidden_states, n_rep):
        calls.append(n_rep)
        return repeat(hidden_states, n_rep)

    monkeypatch.setattr(sdpa_attention, "repeat_kv", counting_repeat)
    return calls


def left_padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of 12 columns, the second left-padded by 5."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 100, (2, 12), generator=generator)
    attention = torch.ones_like(input_ids)
    attention[1, :5] = 0
    input_ids[1, :5] = 0
    return input_ids, attention


def test_a_grouped_query_model_on_the_cpu_is_switched():
    model = build_tiny_model(TinyModelSpec(size=2), seed=0)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    assert use_cpu_sdpa(model)
    assert model.config._attn_implementation == CPU_SDPA


def test_other_models_are_left_as_they_are():
    config = tiny_model_config(TinyModelSpec(size=2))
    config.num_key_value_heads = config.num_attention_heads
    full_heads = type(build_tiny_model(TinyModelSpec(size=2)))(config)
    assert not use_cpu_sdpa(full_heads)
    assert full_heads.config._attn_implementation == "sdpa"

    half_full_heads = type(build_tiny_model(TinyModelSpec(size=2)))(config).to(torch.bfloat16)
    assert use_cpu_sdpa(half_full_heads), "a bfloat16 model on the CPU attends in float32 even without grouped heads"

    eager = build_tiny_model(TinyModelSpec(size=2), seed=0)
    eager.set_attn_implementation("eager")
    assert not use_cpu_sdpa(eager)
    assert eager.config._attn_implementation == "eager"


@pytest.mark.parametrize("architecture", ["qwen2", "qwen3"])
def test_masked_forward_and_decode_equal_sdpa_without_repeating_heads(architecture, repeat_calls):
    reference = build_tiny_model(TinyModelSpec(size=2, architecture=architecture), seed=0).eval()
    grouped = copy.deepcopy(reference)
    assert use_cpu_sdpa(grouped)
    input_ids, attention = left_padded_batch()
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = reference(input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
        assert repeat_calls, "transformers' sdpa repeats the KV heads of a masked call (the cost this module removes)"
        repeat_calls.clear()
        got = grouped(input_ids, attention_mask=attention, position_ids=positions, use_cache=True)
        torch.testing.assert_close(got.logits, expected.logits, atol=TOLERANCE, rtol=0)
        # one decode step over the kept cache, still masked
        step_ids = got.logits[:, -1].argmax(-1, keepdim=True)
        step_mask = torch.cat([attention, torch.ones((2, 1), dtype=attention.dtype)], dim=1)
        step_positions = positions[:, -1:] + 1
        got_step = grouped(
            step_ids, attention_mask=step_mask, position_ids=step_positions, past_key_values=got.past_key_values
        )
        expected_step = reference(
            step_ids, attention_mask=step_mask, position_ids=step_positions, past_key_values=expected.past_key_values
        )
    torch.testing.assert_close(got_step.logits, expected_step.logits, atol=TOLERANCE, rtol=0)
    # the reference's decode step repeated heads again; the grouped model's calls never did
    assert len(repeat_calls) == 2 * reference.config.num_hidden_layers


def test_calls_without_a_mask_go_to_transformers(monkeypatch):
    seen: list[bool] = []
    delegate = sdpa_attention.sdpa_attention_forward

    def recording(module, query, key, value, attention_mask, **kwargs):
        seen.append(attention_mask is None)
        return delegate(module, query, key, value, attention_mask, **kwargs)

    from skyrl_train.models import cpu_attention

    monkeypatch.setattr(cpu_attention, "sdpa_attention_forward", recording)
    model = build_tiny_model(TinyModelSpec(size=2), seed=0).eval()
    use_cpu_sdpa(model)
    module = model.model.layers[0].self_attn
    query, key = torch.randn(1, 4, 3, 32), torch.randn(1, 2, 3, 32)
    output, _ = cpu_sdpa_attention(module, query, key, key, None, scaling=0.2)
    assert seen == [True]
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool).tril()
    masked, _ = cpu_sdpa_attention(module, query, key, key, mask, scaling=0.2)
    assert seen == [True], "a masked CPU call is computed here"
    torch.testing.assert_close(masked, output, atol=TOLERANCE, rtol=0)  # the causal mask is what no-mask means here


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("masked", [True, False])
def test_half_precision_calls_attend_in_float32(dtype, masked):
    """The output is float32 attention over the upcast inputs, cast back: bitwise what the float32 call gives."""
    model = build_tiny_model(TinyModelSpec(size=2), seed=0).to(dtype)
    assert use_cpu_sdpa(model)
    module = model.model.layers[0].self_attn
    generator = torch.Generator().manual_seed(1)
    query = torch.randn(2, 4, 1, 32, generator=generator).to(dtype)
    key = torch.randn(2, 2, 40, 32, generator=generator).to(dtype)
    value = torch.randn(2, 2, 40, 32, generator=generator).to(dtype)
    mask = torch.ones(2, 1, 1, 40, dtype=torch.bool) if masked else None
    if masked:
        mask[1, :, :, :7] = False  # a left-padded row
    output, _ = cpu_sdpa_attention(module, query, key, value, mask, scaling=0.2)
    expected, _ = cpu_sdpa_attention(module, query.float(), key.float(), value.float(), mask, scaling=0.2)
    assert output.dtype == dtype
    assert torch.equal(output, expected.to(dtype))
