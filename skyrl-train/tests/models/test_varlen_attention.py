"""Packed (varlen) attention: every segment attends causally to its own keys only, on SDPA buckets (here) and
flash-attention varlen (GPU, marked), equal to a per-query softmax written out by hand."""

import math

import numpy as np
import pytest
import torch

from skyrl_train.models import varlen_attention
from skyrl_train.models.varlen_attention import VarlenSegments, attend_segments, packed_attention, varlen_kernel

TOLERANCE = 1e-5
"""fp32 outputs of a softmax over <= 7 keys of 8-dim heads: the two computations differ only in summation order
(about 1e-7 relative); gradients likewise."""


def segments_with_a_shared_prompt() -> VarlenSegments:
    """T = 11: a prompt of 3 with its first response (4 tokens, one segment), two more responses of that prompt
    (2 tokens and 1 token, keys: the prompt then their own), a row of 1 token and a row of 3."""
    query_lengths = np.array([4, 2, 1, 1, 3])
    query_starts = np.array([0, 4, 6, 7, 8])
    keys = [np.arange(0, 4), np.array([0, 1, 2, 4, 5]), np.array([0, 1, 2, 6]), np.array([7]), np.arange(8, 11)]
    return VarlenSegments(query_starts, query_lengths, np.concatenate(keys), np.array([len(k) for k in keys]))


def by_hand(q, k, v, segments: VarlenSegments, scale: float) -> torch.Tensor:
    """Query by query: softmax over the keys it may see (its segment's keys up to the end-aligned diagonal)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    rows = []
    for segment, (start, queries) in enumerate(zip(segments.query_starts, segments.query_lengths)):
        keys = torch.as_tensor(segments.keys_of(segment))
        for i in range(queries):
            visible = keys[: i + len(keys) - queries + 1]
            per_head = []
            for head in range(heads):
                kv = head // (heads // kv_heads)
                weights = torch.softmax(k[visible, kv] @ q[start + i, head] * scale, dim=0)
                per_head.append(weights @ v[visible, kv])
            rows.append(torch.stack(per_head))
    return torch.stack(rows)


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_sdpa_buckets_equal_a_softmax_by_hand_forward_and_backward(kv_heads):
    segments = segments_with_a_shared_prompt()
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(11, 4, 8, generator=generator, requires_grad=True)
    k = torch.randn(11, kv_heads, 8, generator=generator, requires_grad=True)
    v = torch.randn(11, kv_heads, 8, generator=generator, requires_grad=True)
    weights = torch.randn(11, 4, 8, generator=generator)
    scale = 1 / math.sqrt(8)
    got = attend_segments(q, k, v, segments, scale=scale, kernel="sdpa")
    grads = torch.autograd.grad((got * weights).sum(), (q, k, v))
    expected = by_hand(q, k, v, segments, scale)
    expected_grads = torch.autograd.grad((expected * weights).sum(), (q, k, v))
    torch.testing.assert_close(got, expected, atol=TOLERANCE, rtol=0)
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=TOLERANCE, rtol=0)


def test_square_segments_without_key_positions_are_plain_causal_rows():
    segments = VarlenSegments(np.array([0, 5, 6]), np.array([5, 1, 3]))
    q, k, v = (torch.randn(9, 2, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    got = attend_segments(q, k, v, segments)  # the default kernel on CPU: sdpa
    for start, length in [(0, 5), (5, 1), (6, 3)]:
        rows = slice(start, start + length)
        alone = torch.nn.functional.scaled_dot_product_attention(
            q[rows].transpose(0, 1), k[rows].transpose(0, 1), v[rows].transpose(0, 1), is_causal=True
        ).transpose(0, 1)
        torch.testing.assert_close(got[rows], alone, atol=TOLERANCE, rtol=0)


def test_buckets_group_segments_of_similar_size():
    equal = VarlenSegments(np.arange(0, 400, 100), np.full(4, 100))
    assert len(equal.buckets(torch.device("cpu"))[0]) == 1  # no padding at all: one SDPA call
    varied = VarlenSegments(np.array([0, 300, 310, 320]), np.array([300, 10, 10, 10]))
    buckets, order = varied.buckets(torch.device("cpu"))
    # 4 x 300 x 300 padded would be 4x the segments' area: the long row gets its own call, the short ones share one.
    assert sorted((bucket.count, bucket.query_width) for bucket in buckets) == [(1, 300), (3, 10)]
    assert sorted(order.tolist()) == list(range(330))


def test_segments_must_tile_the_sequence_and_have_keys_for_their_queries():
    with pytest.raises(ValueError, match="without gaps"):
        VarlenSegments(np.array([0, 3]), np.array([2, 2]))
    with pytest.raises(ValueError, match=">= 1 query"):
        VarlenSegments(np.array([0, 2]), np.array([2, 0]))
    with pytest.raises(ValueError, match="at least as many keys as queries"):
        VarlenSegments(np.array([0]), np.array([3]), np.array([0, 1]), np.array([2]))
    with pytest.raises(ValueError, match="sum\\(key_lengths\\)"):
        VarlenSegments(np.array([0]), np.array([2]), np.array([0, 1, 1]), np.array([2]))


def test_the_kernel_is_flash_attention_only_on_cuda_in_half_precision_with_the_package(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(varlen_attention, "flash_attn_installed", lambda: True)
    assert varlen_kernel(cuda, torch.bfloat16) == "flash_attn"
    assert varlen_kernel(cuda, torch.float16) == "flash_attn"
    assert varlen_kernel(cuda, torch.float32) == "sdpa"  # flash-attention has no fp32 kernel
    assert varlen_kernel(cpu, torch.bfloat16) == "sdpa"
    monkeypatch.setattr(varlen_attention, "flash_attn_installed", lambda: False)
    assert varlen_kernel(cuda, torch.bfloat16) == "sdpa"


@pytest.mark.parametrize("kernel", ["sdpa", "flash_attn"])
def test_either_kernel_refuses_queries_the_segments_do_not_cover(kernel):
    q = k = v = torch.zeros(5, 2, 4)  # the segments cover 11 tokens; checked before any kernel (or CUDA) is needed
    with pytest.raises(ValueError, match="5 query tokens, but the segments cover 11"):
        attend_segments(q, k, v, segments_with_a_shared_prompt(), kernel=kernel)


def test_an_unknown_kernel_is_refused_by_name():
    q = k = v = torch.zeros(11, 2, 4)
    with pytest.raises(ValueError, match="kernel must be one of .* got 'xformers'"):
        attend_segments(q, k, v, segments_with_a_shared_prompt(), kernel="xformers")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash-attention varlen needs a CUDA GPU")
def test_flash_attention_varlen_equals_the_sdpa_buckets_on_gpu():
    pytest.importorskip("flash_attn", reason="the flash-attn package is not installed")
    segments = segments_with_a_shared_prompt()
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(11, heads, 64, generator=generator, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for heads in (4, 2, 2)
    )
    got = attend_segments(q, k, v, segments, scale=0.125, kernel="flash_attn")
    expected = attend_segments(q, k, v, segments, scale=0.125, kernel="sdpa")
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=0)  # bf16: 8 mantissa bits
    grads = torch.autograd.grad(got.float().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.float().sum(), (q, k, v))
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad.float(), expected_grad.float(), atol=5e-2, rtol=0)


@pytest.mark.parametrize(("feature", "value"), [("sliding_window", 8), ("softcap", 30.0), ("s_aux", torch.zeros(2))])
def test_attention_features_the_kernels_lack_are_refused_by_name(feature, value):
    segments = VarlenSegments(np.array([0]), np.array([3]))
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=rf"passes {feature}\); set trainer.remove_microbatch_padding=false"):
        packed_attention(torch.nn.Identity(), q, q, q, None, packed_segments=segments, **{feature: value})
    out, _ = packed_attention(torch.nn.Identity(), q, q, q, None, packed_segments=segments, sliding_window=None)
    assert out.shape == (1, 3, 2, 4)
