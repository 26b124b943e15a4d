"""Sequence packing: the packed layout by hand, and packed forwards/backwards equal to the padded ones (log-probs,
entropies, values, gradients) for rows of very different lengths, shared prompts, LoRA and gradient checkpointing."""

import random

import numpy as np
import pytest
import torch
from transformers import Qwen2ForCausalLM, Qwen2ForTokenClassification

from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.models.lora import LoRASettings, apply_lora
from skyrl_train.models.packing import (
    LENGTH_BUCKETS_PER_DOUBLING,
    bucketed_length,
    enable_packed_attention,
    pack_rows,
    packed_response_logprobs,
    packed_token_scores,
    packing_support,
)
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model, tiny_model_config
from skyrl_train.models.varlen_attention import VarlenSegments
from skyrl_train.training_batch import TrainingBatch

LOGPROB_TOLERANCE = 1e-5
"""fp32 log-probs (magnitude ~5, ulp ~5e-7): packed and padded run the same dot products over the same keys with
other matmul and attention shapes, so only the summation order differs, a few ulp per layer (observed: equal to the
bit or within 1e-6). A row attending across rows, or a position id off by one, moves them by > 1e-2."""
GRADIENT_TOLERANCE = 1e-5
"""The same summation-order noise in the gradients, relative to each parameter's largest gradient entry (observed
< 1e-6): the gradient sums the same per-token terms in another order."""


@pytest.fixture(scope="module")
def varied_batch(rollout_row):
    """`varied_batch(seed=0)`: groups of 3 samples of one prompt (1-9 tokens), responses of 0, 1, 2, 7, 60 and 150
    tokens."""

    def build(seed: int = 0) -> TrainingBatch:
        rng = random.Random(seed)
        lengths = [150, 1, 0, 2, 60, 7, 1, 150, 7, 60, 2, 1]
        rows = []
        for index, length in enumerate(lengths):
            if index % 3 == 0:
                prompt = [rng.randrange(5, 100) for _ in range(rng.randint(1, 9))]
            rows.append(rollout_row(str(index // 3), list(prompt), [rng.randrange(5, 100) for _ in range(length)]))
        return TrainingBatch.from_trajectories(rows, pad_token_id=0)

    return build


def tiny(architecture: str = "qwen2") -> torch.nn.Module:
    return build_tiny_model(TinyModelSpec(size=2, architecture=architecture, max_position_embeddings=256), seed=0)


@pytest.mark.parametrize(("architecture", "share"), [("qwen2", False), ("qwen3", True)])
def test_packed_forward_and_backward_equal_the_padded_ones(
    architecture, share, logprobs_and_gradients, varied_batch, assert_same_outputs
):
    batch = varied_batch()
    model = tiny(architecture)
    padded = logprobs_and_gradients(model, batch, pack=False)
    enable_packed_attention(model)
    packed = logprobs_and_gradients(model, batch, pack=True, share=share)
    assert_same_outputs(packed, padded, LOGPROB_TOLERANCE, GRADIENT_TOLERANCE, 1e-12)
    assert packed[0][batch.response_mask == 0].abs().sum() == 0  # nothing but zeros outside the responses


def test_bucketed_lengths_are_few_and_at_most_a_32nd_longer():
    for low in (64, 1024, 4096):  # every length of one doubling lands on one of 32 (+ the next power of two)
        assert len({bucketed_length(tokens) for tokens in range(low, 2 * low)}) == LENGTH_BUCKETS_PER_DOUBLING + 1
    for tokens in range(0, 20000):
        rounded = bucketed_length(tokens)
        assert (
            tokens <= rounded <= tokens * (1 + 1 / LENGTH_BUCKETS_PER_DOUBLING) and bucketed_length(rounded) == rounded
        )
    assert [bucketed_length(tokens) for tokens in (0, 63, 65, 2001, 4097)] == [0, 63, 66, 2016, 4224]
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        bucketed_length(-1)


@pytest.mark.parametrize("share", [False, True])
def test_filler_tokens_round_the_length_up_and_change_no_result(
    share, logprobs_and_gradients, varied_batch, assert_same_outputs
):
    """`bucket_length`: the packed sequence and the LM head's positions grow to bucketed lengths; log-probs,
    entropies and gradients stay the unbucketed ones up to summation order (fillers are a segment of their own)."""
    batch = varied_batch()
    plain = pack_rows(batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width, share)
    bucketed = pack_rows(
        batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width, share, bucket_length=True
    )
    filler = bucketed.num_tokens - plain.num_tokens
    assert bucketed.num_tokens == bucketed_length(plain.num_tokens) and filler > 0  # the batch is not a bucket already
    assert torch.equal(bucketed.input_ids[:, : plain.num_tokens], plain.input_ids)
    assert bucketed.position_ids[0, plain.num_tokens :].tolist() == list(range(filler))
    assert bucketed.segments.query_lengths[-1] == filler and torch.equal(
        bucketed.predict_positions, plain.predict_positions
    )
    assert len(bucketed.head_positions) == bucketed_length(len(plain.predict_positions)) > len(plain.predict_positions)
    model = tiny()
    enable_packed_attention(model)
    expected = logprobs_and_gradients(model, batch, pack=True, share=share)
    got = logprobs_and_gradients(model, batch, pack=True, share=share, bucket=True)
    assert_same_outputs(got, expected, LOGPROB_TOLERANCE, GRADIENT_TOLERANCE, 1e-12)


def test_attention_across_rows_would_change_the_logprobs(varied_batch):
    """The equality above is not vacuous: one segment over the whole packed sequence (rows attend to earlier rows)
    gives other log-probs."""
    batch = varied_batch()
    model = tiny()
    enable_packed_attention(model)
    packed = pack_rows(batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width)
    with torch.no_grad():
        right, _ = packed_response_logprobs(model, packed)
        packed.segments = VarlenSegments(np.array([0]), np.array([packed.num_tokens]))
        leaking, _ = packed_response_logprobs(model, packed)
    assert ((right - leaking) * batch.response_mask).abs().max() > 1e-2


def test_the_layout_by_hand(rollout_row):
    # prompt width 3, response width 3:  row 0 [0 7 8 | 9 10 0]   row 1 [5 6 7 | 1 0 0]   row 2 [0 7 8 | 11 12 13]
    batch = TrainingBatch.from_trajectories(
        [rollout_row("a", [7, 8], [9, 10]), rollout_row("b", [5, 6, 7], [1]), rollout_row("a", [7, 8], [11, 12, 13])],
        pad_token_id=0,
    )
    args = (batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width)
    # Each row: its prompt, then its response without the last token (which predicts nothing).
    alone = pack_rows(*args)
    assert alone.input_ids.tolist() == [[7, 8, 9, 5, 6, 7, 7, 8, 11, 12]]
    assert alone.position_ids.tolist() == [[0, 1, 2, 0, 1, 2, 0, 1, 2, 3]]
    assert alone.segments.query_lengths.tolist() == [3, 3, 4] and not alone.segments.shares_keys
    # Response token 0 is predicted at the prompt's last token, token j at response token j - 1.
    assert alone.predict_positions.tolist() == [1, 2, 5, 7, 8, 9]
    assert alone.target_ids.tolist() == [9, 10, 1, 11, 12, 13]
    assert alone.scatter(torch.arange(1.0, 7.0)).tolist() == [[1, 2, 0], [3, 0, 0], [4, 5, 6]]
    # Row 2 repeats row 0's prompt: only its response is packed, attending to that prompt then to itself.
    shared = pack_rows(*args, share_prompts=True)
    assert shared.input_ids.tolist() == [[7, 8, 9, 5, 6, 7, 11, 12]]
    assert shared.position_ids.tolist() == [[0, 1, 2, 0, 1, 2, 2, 3]]
    assert shared.segments.query_lengths.tolist() == [3, 3, 2]
    assert [shared.segments.keys_of(s).tolist() for s in range(3)] == [[0, 1, 2], [3, 4, 5], [0, 1, 6, 7]]
    assert shared.predict_positions.tolist() == [1, 2, 5, 1, 6, 7]
    assert shared.shared_prompt_rows == 1


def test_rows_must_be_one_span_with_a_prompt(varied_batch, rollout_row):
    batch = varied_batch()
    holed = batch.attention_mask.clone()
    holed[4, batch.prompt_width + 1] = 0  # row 4 has 60 response tokens: a hole inside them
    with pytest.raises(ValueError, match="row 4's attention mask is not one span"):
        pack_rows(batch.input_ids, holed, batch.position_ids, batch.prompt_width)
    no_prompt = TrainingBatch.from_trajectories(
        [rollout_row("a", [7], [9]), rollout_row("b", [], [3, 4])], pad_token_id=0
    )
    with pytest.raises(ValueError, match="row 1 has no prompt token"):
        pack_rows(no_prompt.input_ids, no_prompt.attention_mask, no_prompt.position_ids, no_prompt.prompt_width)


def test_packed_values_equal_the_padded_value_head(varied_batch):
    batch = varied_batch(seed=1)
    config = tiny_model_config(TinyModelSpec(size=2, max_position_embeddings=256))
    config.num_labels, config.classifier_dropout = 1, 0.0  # as the critic worker loads it
    torch.manual_seed(0)
    critic = Qwen2ForTokenClassification(config)
    scores = critic(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
    start = batch.prompt_width - 1
    padded = scores.logits[:, start : start + batch.response_width, 0] * batch.response_mask
    padded_grads = torch.autograd.grad(padded.sum(), list(critic.parameters()))
    enable_packed_attention(critic)
    packed_rows = pack_rows(
        batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width, share_prompts=True
    )
    packed = packed_token_scores(critic, packed_rows) * batch.response_mask
    packed_grads = torch.autograd.grad(packed.sum(), list(critic.parameters()))
    torch.testing.assert_close(packed, padded, atol=LOGPROB_TOLERANCE, rtol=0)
    for got, expected in zip(packed_grads, padded_grads, strict=True):
        assert (got - expected).abs().max().item() <= GRADIENT_TOLERANCE * expected.abs().max().item() + 1e-12


def test_a_lora_model_packs_and_only_its_adapters_get_gradients(
    logprobs_and_gradients, varied_batch, assert_same_outputs
):
    batch = varied_batch(seed=2)
    model = apply_lora(tiny(), LoRASettings(rank=4, alpha=8, target_modules="all-linear"))
    for name, parameter in model.named_parameters():  # non-zero B so the adapters change the output
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.05, generator=torch.Generator().manual_seed(len(name)))
    padded = logprobs_and_gradients(model, batch, pack=False)
    enable_packed_attention(model)
    packed = logprobs_and_gradients(model, batch, pack=True, share=True)
    assert_same_outputs(packed, padded, LOGPROB_TOLERANCE, GRADIENT_TOLERANCE, 1e-12)
    assert packed[2] and all("lora_" in name for name in packed[2])


def test_gradient_checkpointing_recomputes_the_packed_attention(
    logprobs_and_gradients, varied_batch, assert_same_outputs
):
    batch = varied_batch(seed=3)
    model = tiny()
    model.train()
    padded = logprobs_and_gradients(model, batch, pack=False)
    enable_packed_attention(model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    packed = logprobs_and_gradients(model, batch, pack=True, share=True)
    assert_same_outputs(packed, padded, LOGPROB_TOLERANCE, GRADIENT_TOLERANCE, 1e-12)


class _NoLogitsToKeep(Qwen2ForCausalLM):
    def forward(self, input_ids=None, attention_mask=None, position_ids=None, use_cache=None):
        return super().forward(input_ids, attention_mask, position_ids, use_cache=use_cache)


def test_models_that_cannot_pack_are_refused_with_the_reason(tiny_hf_config):
    custom = _NoLogitsToKeep(tiny_model_config(TinyModelSpec(size=1)))
    assert "takes no logits_to_keep" in packing_support(custom)
    capped = tiny()
    capped.config.attn_logit_softcapping = 30.0  # as Gemma 2 configs say
    assert "soft-caps its attention logits" in packing_support(capped)
    sunk = tiny()
    sunk.model.layers[0].self_attn.sinks = torch.nn.Parameter(torch.zeros(2))  # as gpt-oss attention holds them
    assert "has attention sinks" in packing_support(sunk)
    config = tiny_hf_config("qwen2", use_sliding_window=True, sliding_window=8, max_window_layers=0)
    model = Qwen2ForCausalLM(config)
    assert "sliding-window" in packing_support(model)
    with pytest.raises(ValueError, match="sequence packing: Qwen2ForCausalLM has sliding-window"):
        enable_packed_attention(model)
    assert packing_support(tiny()) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="flash-attention varlen needs a CUDA GPU")
def test_packed_bf16_forward_through_flash_attention_matches_the_padded_one_on_gpu(varied_batch):
    pytest.importorskip("flash_attn", reason="the flash-attn package is not installed")
    batch = varied_batch(seed=4)
    model = tiny().to("cuda", torch.bfloat16)
    cuda = {name: getattr(batch, name).cuda() for name in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        padded, _ = response_logprobs(
            model, cuda["input_ids"], cuda["attention_mask"], cuda["position_ids"], batch.prompt_width
        )
        enable_packed_attention(model)
        packed, _ = response_logprobs(
            model,
            cuda["input_ids"],
            cuda["attention_mask"],
            cuda["position_ids"],
            batch.prompt_width,
            share_prompts=True,
            pack=True,
        )
    mask = batch.response_mask.cuda()
    # bf16 (8 mantissa bits) log-probs of magnitude ~5: kernels that sum in another order differ by ~0.05.
    torch.testing.assert_close(packed * mask, padded * mask, atol=0.1, rtol=0)
