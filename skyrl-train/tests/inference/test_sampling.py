"""Tests for logit filtering and next-token sampling against hand-computed examples."""

import math

import pytest
import torch

from skyrl_train.inference.sampling import (
    apply_repetition_penalty,
    filter_logits,
    sample_next_tokens,
    seeded_uniforms,
    top_logprobs,
)
from skyrl_train.inference.stopping import StopChecker, trim_stop_string
from skyrl_train.inference.types import SamplingParams

NEG = float("-inf")


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    assert filter_logits(logits, top_k=2).tolist() == [[NEG, 4.0, 3.0, NEG]]


def test_top_p_keeps_the_smallest_nucleus_reaching_p():
    # probs = [0.5, 0.3, 0.2] (logits are their logs). Mass ahead: 0, 0.5, 0.8.
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    kept = filter_logits(logits, top_p=0.7).isfinite().tolist()
    assert kept == [[True, True, False]]  # 0.5 < 0.7 so the second token is still needed; 0.8 >= 0.7 drops the third
    assert filter_logits(logits, top_p=0.5).isfinite().tolist() == [[True, False, False]]


def test_min_p_drops_tokens_below_fraction_of_the_best():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    # threshold 0.25 * 0.6 = 0.15: 0.1 is dropped, 0.3 kept
    assert filter_logits(logits, min_p=0.25).isfinite().tolist() == [[True, True, False]]


def test_greedy_picks_argmax_and_reports_unscaled_logprob():
    logits = torch.tensor([[0.0, math.log(3.0)]])  # probs 1/4, 3/4
    tokens, logprobs = sample_next_tokens(logits, SamplingParams(temperature=0))
    assert tokens.tolist() == [1]
    assert logprobs.item() == pytest.approx(math.log(0.75), abs=1e-6)


def test_sampled_logprob_is_under_temperature_scaled_distribution():
    logits = torch.tensor([[0.0, 2.0]])
    params = SamplingParams(temperature=2.0, top_k=1)  # top_k=1 forces token 1 but the logprob ignores filtering
    tokens, logprobs = sample_next_tokens(logits, params, torch.Generator().manual_seed(0))
    # scaled logits [0, 1]: log p(1) = 1 - log(1 + e)
    assert tokens.tolist() == [1]
    assert logprobs.item() == pytest.approx(1 - math.log(1 + math.e), abs=1e-6)


def test_sampling_frequencies_follow_probabilities():
    logits = torch.log(torch.tensor([[0.2, 0.8]])).repeat(4000, 1)
    tokens, _ = sample_next_tokens(logits, SamplingParams(temperature=1.0), torch.Generator().manual_seed(1))
    assert tokens.float().mean().item() == pytest.approx(0.8, abs=0.03)


def test_sampling_params_validation_names_the_field():
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="unknown keys \\['temp'\\]"):
        SamplingParams.from_dict({"temp": 1.0})
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")


def test_stop_checker_and_trim():
    checker = StopChecker(SamplingParams(stop=("##",), stop_token_ids=(7,)), eos_token_ids={4}, max_tokens=3)
    assert checker.check([1]) is None
    assert checker.check([1, 4]) == "stop"
    assert checker.check([1, 7]) == "stop"
    assert checker.check([1], "x##") == "stop"
    assert checker.check([1, 2, 3]) == "length"
    ignoring = StopChecker(SamplingParams(ignore_eos=True), eos_token_ids={4}, max_tokens=9)
    assert ignoring.check([4]) is None
    assert trim_stop_string("ab##cd!!", ("!!", "##"), include=False) == "ab"
    assert trim_stop_string("ab##cd", ("##",), include=True) == "ab##"


def test_inverse_cdf_sample_picks_the_first_token_past_the_uniform_and_never_a_zero_probability_one():
    from skyrl_train.inference.sampling import inverse_cdf_sample

    # cumulative probabilities 0.25, 0.25, 0.75, 1.0 (exact in binary): token 1 has probability 0, never picked
    probs = torch.tensor([[0.25, 0.0, 0.5, 0.25]]).repeat(6, 1)
    uniforms = torch.tensor([0.0, 0.2, 0.25, 0.7, 0.75, 0.99])
    assert inverse_cdf_sample(probs, uniforms).tolist() == [0, 0, 2, 2, 3, 3]
    # a row whose probabilities sum to slightly less than 1 is scaled, so u near 1 still lands on the last token
    assert inverse_cdf_sample(torch.tensor([[0.5, 0.49]]), torch.tensor([0.999])).tolist() == [1]


def test_uniform_sampling_follows_the_distribution_and_matches_logprobs():
    probs = torch.tensor([0.1, 0.6, 0.3])
    logits = probs.log().repeat(30000, 1)
    uniforms = torch.rand(30000, generator=torch.Generator().manual_seed(3))
    tokens, logprobs = sample_next_tokens(logits, SamplingParams(temperature=1.0), uniforms=uniforms)
    frequencies = torch.bincount(tokens, minlength=3).float() / len(tokens)
    assert torch.allclose(frequencies, probs, atol=0.01)
    assert torch.allclose(logprobs, probs.log()[tokens], atol=1e-6)


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    logits = torch.tensor([[2.0, -1.0, 3.0, -0.5], [2.0, -1.0, 3.0, -0.5]])
    seen = torch.tensor([[True, True, False, False], [False, False, True, True]])
    penalised = apply_repetition_penalty(logits, seen, 2.0)
    # row 0: tokens 0 (2 -> 2/2 = 1) and 1 (-1 -> -1*2 = -2) seen; row 1: tokens 2 (3 -> 1.5) and 3 (-0.5 -> -1)
    assert penalised.tolist() == [[1.0, -2.0, 3.0, -0.5], [2.0, -1.0, 1.5, -1.0]]
    assert torch.equal(apply_repetition_penalty(logits, seen, 1.0), logits)


def test_repetition_penalty_changes_the_greedy_pick_and_its_logprob():
    logits = torch.tensor([[2.0, 1.5]])
    seen = torch.tensor([[True, False]])
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    tokens, logprobs = sample_next_tokens(logits, params, seen=seen)
    # penalised logits [1.0, 1.5]: token 1 wins; its logprob is under the penalised distribution
    assert tokens.tolist() == [1]
    assert logprobs.item() == pytest.approx(1.5 - math.log(math.exp(1.0) + math.exp(1.5)), abs=1e-6)
    unpenalised, _ = sample_next_tokens(logits, SamplingParams(temperature=0), seen=seen)
    assert unpenalised.tolist() == [0]


def test_repetition_penalty_applies_before_temperature():
    logits = torch.tensor([[4.0, 0.0]])
    seen = torch.tensor([[True, False]])
    params = SamplingParams(temperature=2.0, repetition_penalty=2.0, top_k=1)
    _, logprobs = sample_next_tokens(logits, params, torch.Generator().manual_seed(0), seen=seen)
    # (4 / 2 penalty) / 2 temperature = 1: log p(0) = 1 - log(e + 1)
    assert logprobs.item() == pytest.approx(1 - math.log(math.e + 1), abs=1e-6)


def test_top_logprobs_are_the_k_largest_under_the_sampled_distribution():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    values, ids = top_logprobs(logits, SamplingParams(temperature=2.0, top_k=1), 2)
    expected = torch.log_softmax(logits / 2.0, dim=-1)  # top-k filtering does not change reported logprobs
    assert ids.tolist() == [[1, 3]]
    assert torch.allclose(values, expected[:, [1, 3]])


def test_seeded_uniforms_depend_on_the_seed_and_position_only():
    together = seeded_uniforms([7, 8, -3, 2**70], 6)
    assert together.shape == (4, 6) and together.dtype == torch.float32
    assert torch.equal(seeded_uniforms([8], 4)[0], together[1, :4])  # neither the other rows nor the width matter
    assert torch.equal(seeded_uniforms([-3, 7], 6)[1], together[0])
    assert not torch.equal(together[0], together[1])  # neighbouring seeds (a prompt's samples) differ
    assert torch.equal(seeded_uniforms([2**70], 6)[0], seeded_uniforms([2**70 % 2**64], 6)[0])  # seeds wrap at 64 bits


def test_seeded_uniforms_look_uniform_and_independent():
    numbers = seeded_uniforms(list(range(2000)), 50).double()  # 100,000 numbers from neighbouring seeds
    assert float(numbers.min()) >= 0.0 and float(numbers.max()) < 1.0
    # mean 1/2 and variance 1/12; with n = 1e5 their standard errors are ~9e-4 and ~2.7e-4: 5 sigma bounds
    assert abs(float(numbers.mean()) - 0.5) < 5 * (1 / 12 / 1e5) ** 0.5
    assert abs(float(numbers.var()) - 1 / 12) < 5 * (1 / 180 / 1e5) ** 0.5
    counts = torch.histc(numbers, bins=20, min=0.0, max=1.0)
    chi_square = float(((counts - 5000) ** 2 / 5000).sum())
    assert chi_square < 50  # 19 degrees of freedom: P(chi2 > 50) ~ 1e-4
    # neither neighbouring seeds nor neighbouring positions are correlated (standard error of r ~ 1/sqrt(n))
    across_seeds = torch.corrcoef(torch.stack([numbers[:-1].flatten(), numbers[1:].flatten()]))[0, 1]
    along_rows = torch.corrcoef(torch.stack([numbers[:, :-1].flatten(), numbers[:, 1:].flatten()]))[0, 1]
    assert abs(float(across_seeds)) < 5 / (99_950**0.5) and abs(float(along_rows)) < 5 / (98_000**0.5)
