"""Tests for the supervised warm start: example encoding, the answer-only loss, data order, scoring and the loop."""

import math

import pytest
import torch

from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.recipes import warm_start as ws
from skyrl_train.recipes.warm_start import (
    WarmStartSettings,
    answer_loss,
    batch_order,
    collate,
    encode_episode,
    encode_example,
    encode_examples,
    make_splits,
    sampled_stats,
    score_response,
    warm_start,
)

torch.set_num_threads(1)

TINY = dict(size=1, train_examples=64, eval_examples=8, max_steps=4, batch_size=8, eval_every=2, sample_prompts=4)


def _row(question: str, answer: str) -> dict:
    return {
        "data_source": "synthetic/arithmetic",
        "prompt": [{"role": "user", "content": question}],
        "env_class": "arithmetic",
        "reward_spec": {"method": "rule", "ground_truth": answer},
        "extra_info": {"question": question, "answer": answer},
    }


def test_encode_example_appends_answer_and_eos_after_the_chat_prompt():
    tokenizer = build_char_tokenizer()
    ids, prompt_length = encode_example(tokenizer, _row("13-66=", "-53"))
    # "<|im_start|>" "user" "\n" "13-66=" "<|im_end|>" "\n" "<|im_start|>" "assistant" "\n": 1+4+1+6+1+1+1+9+1 = 25
    assert prompt_length == 25
    assert tokenizer.decode(ids[:prompt_length]) == "<|im_start|>user\n13-66=<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(ids[prompt_length:]) == "-53<|im_end|>"
    assert ids[-1] == 4 and len(ids) == 25 + 3 + 1


def test_collate_right_pads_and_labels_only_answer_tokens():
    batch = collate([([3, 10, 11, 4], [0, 0, 1, 1]), ([3, 12, 4], [0, 1, 1])], pad_token_id=0)
    assert batch["input_ids"].tolist() == [[3, 10, 11, 4], [3, 12, 4, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert batch["labels"].tolist() == [[-100, -100, 11, 4], [-100, 12, 4, -100]]


def test_answer_loss_is_mean_cross_entropy_over_labelled_next_tokens():
    # vocab 2, one sequence of 3 positions; labels at positions 1 and 2 are predicted from positions 0 and 1.
    # position 0 logits (0, ln 3): p(token 1) = 3/4 -> -ln(0.75) = 0.28768
    # position 1 logits (0, 0):    p(token 0) = 1/2 -> ln 2      = 0.69315
    # position 2 logits are never used (nothing follows). Mean = 0.49041
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0], [5.0, -5.0]]])
    labels = torch.tensor([[-100, 1, 0]])
    assert answer_loss(logits, labels).item() == pytest.approx(0.49041, abs=1e-5)
    # a prompt-only label (position 1 masked) leaves just the second term
    assert answer_loss(logits, torch.tensor([[-100, -100, 0]])).item() == pytest.approx(0.69315, abs=1e-5)


def test_batch_order_is_seeded_and_covers_each_example_once_per_pass():
    order = batch_order(num_examples=5, steps=5, batch_size=2, seed=3)
    flat = [i for batch in order for i in batch]
    assert len(order) == 5 and all(len(batch) == 2 for batch in order)
    assert sorted(flat[:5]) == [0, 1, 2, 3, 4] and sorted(flat[5:10]) == [0, 1, 2, 3, 4]
    assert order == batch_order(5, 5, 2, seed=3)
    assert order != batch_order(5, 5, 2, seed=4)


def test_splits_are_disjoint_and_the_test_split_matches_a_quickstart_dataset():
    from skyrl_gym.envs.synthetic.generate import generate_splits

    settings = WarmStartSettings(**TINY)
    splits = make_splits(settings)
    train_questions = {row["extra_info"]["question"] for row in splits["train"]}
    test_questions = [row["extra_info"]["question"] for row in splits["test"]]
    assert len(train_questions) == 64 and len(test_questions) == 8
    assert not train_questions & set(test_questions)
    other = generate_splits("arithmetic", train_size=500, test_size=8, difficulty=2, seed=0, progress=False)
    assert [row["extra_info"]["question"] for row in other["test"]] == test_questions


def test_asking_for_more_problems_than_the_difficulty_has_names_the_fields():
    with pytest.raises(ValueError, match=r"has 200 distinct problems; train_examples \(190\) \+ eval_examples \(20\)"):
        WarmStartSettings(difficulty=1, train_examples=190, eval_examples=20)  # d1: 10 * 10 operands * 2 operators
    assert len(make_splits(WarmStartSettings(difficulty=1, train_examples=150, eval_examples=50))["train"]) == 150


def test_score_response_uses_the_env_reward_and_parse_verdict():
    row = _row("13-66=", "-53")
    assert score_response(row, "-53") == (1.0, True)
    assert score_response(row, "53") == (0.0, True)
    assert score_response(row, "fifty") == (0.0, False)


def test_sampled_stats_summarise_per_prompt_rewards(monkeypatch):
    rows = [_row("13-66=", "-53"), _row("3+4=", "7")]
    # prompt 0: one right, one unreadable; prompt 1: both right
    monkeypatch.setattr(ws, "generate_responses", lambda *args, **kwargs: ["-53", "x", "7", "7"])
    stats = sampled_stats(model=None, tokenizer=None, rows=rows, n=2)
    assert stats.accuracy == 0.75  # 3 of 4 samples
    assert stats.well_formed == 0.75  # "x" is not an integer
    assert stats.prompts_with_a_correct_sample == 1.0
    assert stats.prompts_with_mixed_rewards == 0.5  # only prompt 0 has both outcomes


def test_training_stops_at_the_first_evaluation_reaching_target_low(monkeypatch):
    accuracies = iter([0.05, 0.25, 0.9])
    monkeypatch.setattr(ws, "greedy_accuracy", lambda *args, **kwargs: next(accuracies))
    settings = WarmStartSettings(**{**TINY, "max_steps": 10, "target_low": 0.2, "target_high": 0.4})
    result = warm_start(settings, progress=False)
    assert result.steps == 4 and result.reached_target and result.greedy_accuracy == 0.25
    assert [record["step"] for record in result.history] == [2, 4]


def test_warm_start_is_deterministic_and_lowers_the_loss():
    settings = WarmStartSettings(**{**TINY, "max_steps": 30, "eval_every": 15, "target_low": 0.0, "lr": 3e-3})
    first = warm_start(settings, progress=False)
    second = warm_start(settings, progress=False)
    assert first.steps == 30 and not first.reached_target
    assert first.history[1]["loss"] < first.history[0]["loss"]
    for a, b in zip(first.model.parameters(), second.model.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"task": "sorting"}, "unknown synthetic task 'sorting'"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"target_low": 0.5, "target_high": 0.3}, "need target_low <= target_high"),
        ({"size": 0}, "size must be a positive integer, got 0"),
        ({"architecture": "llama"}, "architecture must be 'qwen2' or 'qwen3'"),
        ({"difficulty": 0}, "difficulty must be an integer from 1"),
        ({"turns": 0}, "turns must be a positive integer, got 0"),
        ({"follow_up": "next one please"}, "follow_up must contain {question}"),
        ({"follow_up": "{question} {answer}"}, "follow_up may use only {question} and {previous_answer}"),
    ],
)
def test_bad_settings_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        WarmStartSettings(**overrides)


def test_a_multi_turn_example_is_what_the_multi_turn_generator_builds_with_every_answer_labelled():
    from skyrl_train.generators.chat import ObservationRenderer

    tokenizer = build_char_tokenizer()
    rows = [_row("19+71=", "90"), _row("3+4=", "7"), _row("50+50=", "100")]
    ids, labelled = encode_episode(tokenizer, rows, follow_up="Seen {previous_answer}. {question}")
    assert tokenizer.decode(ids) == (
        "<|im_start|>user\n19+71=<|im_end|>\n<|im_start|>assistant\n90<|im_end|>"
        "\n<|im_start|>user\nSeen 90. 3+4=<|im_end|>\n<|im_start|>assistant\n7<|im_end|>"
        "\n<|im_start|>user\nSeen 7. 50+50=<|im_end|>\n<|im_start|>assistant\n100<|im_end|>"
    )
    answers = [tokenizer.decode([t for t, keep in zip(ids, labelled) if keep])]
    assert answers == ["90<|im_end|>7<|im_end|>100<|im_end|>"]
    # the token layout the generator's _run_turns produces: prompt, answer + eos, then the renderer's continuation
    renderer = ObservationRenderer(tokenizer)
    first, prompt_length = encode_example(tokenizer, rows[0])
    expected = first + renderer.continuation_ids([{"role": "user", "content": "Seen 90. 3+4="}])
    assert ids[: len(expected)] == expected and sum(labelled[:prompt_length]) == 0


def test_examples_pair_each_row_with_the_next_ones_when_turns_is_above_one():
    tokenizer = build_char_tokenizer()
    rows = [_row("1+1=", "2"), _row("2+2=", "4"), _row("3+3=", "6")]
    settings = WarmStartSettings(**{**TINY, "turns": 2})
    examples = encode_examples(tokenizer, rows, settings)
    labelled = [tokenizer.decode([t for t, keep in zip(ids, mask) if keep]) for ids, mask in examples]
    assert labelled == ["2<|im_end|>4<|im_end|>", "4<|im_end|>6<|im_end|>", "6<|im_end|>2<|im_end|>"]
    single = encode_examples(tokenizer, rows, WarmStartSettings(**TINY))
    assert [tokenizer.decode([t for t, keep in zip(ids, mask) if keep]) for ids, mask in single][0] == "2<|im_end|>"


def test_single_turn_settings_keep_their_cache_key_and_multi_turn_settings_get_their_own():
    from dataclasses import asdict

    from skyrl_train.recipes.embedded import cache_key

    single = WarmStartSettings(**TINY)
    left_out = ("turns", "follow_up", "mlp_ratio")  # fields added later, left out at their defaults
    assert single.to_dict() == {k: v for k, v in asdict(single).items() if k not in left_out}
    multi = WarmStartSettings(**{**TINY, "turns": 2})
    assert multi.to_dict()["turns"] == 2 and cache_key(multi) != cache_key(single)
    assert WarmStartSettings(**multi.to_dict()) == multi and WarmStartSettings(**single.to_dict()) == single
    assert cache_key(WarmStartSettings(**{**TINY, "follow_up": "Next: {question}"})) != cache_key(single)
    wider = WarmStartSettings(**{**TINY, "mlp_ratio": 4})
    assert wider.to_dict()["mlp_ratio"] == 4 and cache_key(wider) != cache_key(single)
    assert wider.model_spec.mlp_ratio == 4 and WarmStartSettings(**wider.to_dict()) == wider


def test_a_multi_turn_warm_start_runs_and_lowers_the_loss():
    settings = WarmStartSettings(
        **{**TINY, "turns": 2, "follow_up": "Next: {question}", "max_steps": 30, "eval_every": 15, "target_low": 0.0}
    )
    result = warm_start(settings, progress=False)
    assert result.steps == 30 and result.history[1]["loss"] < result.history[0]["loss"]
