"""PromptDataset: items for the generator, prompt-length filtering by the chat template, stable uids."""

import json
import logging

import pytest

import skyrl_gym
from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.dataset import DatasetSchemaError, PromptDataset
from skyrl_train.models.tokenizer import build_char_tokenizer

# With the char tokenizer a single user message of n characters is 19 + n tokens after the chat template:
# <|im_start|> (1) + "user\n" (5) + n + <|im_end|> (1) + "\n" (1) + <|im_start|> (1) + "assistant\n" (10).
TEMPLATE_OVERHEAD = 19


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def row(content, data_source="hand", **more):
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": content}],
        "env_class": "arithmetic",
        "reward_spec": {"method": "rule", "ground_truth": "0"},
        "extra_info": {"n": len(content)},
        **more,
    }


def test_items_carry_prompt_env_class_extras_and_uid(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "a.jsonl", [row("2+2=", level="easy")])
    item = PromptDataset([path], tokenizer, max_prompt_length=64)[0]
    assert item == {
        "prompt": [{"role": "user", "content": "2+2="}],
        "env_class": "arithmetic",
        "env_extras": {
            "data_source": "hand",
            "reward_spec": {"method": "rule", "ground_truth": "0"},
            "extra_info": {"n": 4},
            "level": "easy",
        },
        "uid": "0:0",
    }


def test_long_prompts_are_dropped_counted_and_logged_never_truncated(tmp_path, tokenizer, caplog):
    # content lengths 1, 5, 6, 10 -> 20, 24, 25, 29 tokens; the limit 24 keeps the first two
    path = write_jsonl(
        tmp_path / "a.jsonl",
        [row("1"), row("12345"), row("123456", data_source="long/source"), row("1234567890")],
    )
    with caplog.at_level(logging.WARNING, logger="skyrl_train.dataset.prompt_dataset"):
        dataset = PromptDataset([path], tokenizer, max_prompt_length=TEMPLATE_OVERHEAD + 5)
    assert len(dataset) == 2 and dataset.num_rows_read == 4 and dataset.num_too_long == 2
    assert dataset.prompt_lengths == [20, 24]
    assert [dataset[i]["prompt"][0]["content"] for i in range(2)] == ["1", "12345"]
    assert [dataset[i]["uid"] for i in range(2)] == ["0:0", "0:1"]
    message = caplog.records[-1].getMessage()
    assert "dropped 2 of 4 prompts longer than max_prompt_length=24" in message
    assert "data_source 'long/source' (uid 0:2, 25 tokens, longest 29)" in message


def test_nothing_dropped_means_no_warning(tmp_path, tokenizer, caplog):
    path = write_jsonl(tmp_path / "a.jsonl", [row("1")])
    with caplog.at_level(logging.WARNING):
        dataset = PromptDataset([path], tokenizer, max_prompt_length=20)
    assert dataset.num_too_long == 0 and not caplog.records


def test_all_prompts_too_long_is_an_error(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "a.jsonl", [row("12"), row("123")])
    with pytest.raises(ValueError, match=r"all 2 prompts of .* are longer than max_prompt_length=20 tokens"):
        PromptDataset([path], tokenizer, max_prompt_length=20)


def test_the_whole_conversation_counts_toward_the_length(tmp_path, tokenizer):
    # system "ab" adds <|im_start|> "system\n" "ab" <|im_end|> "\n" = 1 + 7 + 2 + 1 + 1 = 12 tokens
    two = {**row("x"), "prompt": [{"role": "system", "content": "ab"}, {"role": "user", "content": "x"}]}
    dataset = PromptDataset([write_jsonl(tmp_path / "a.jsonl", [two])], tokenizer, max_prompt_length=100)
    assert dataset.prompt_lengths == [TEMPLATE_OVERHEAD + 1 + 12]


def test_uids_name_the_file_and_row_across_files_and_formats(tmp_path, tokenizer):
    paths = write_dataset(tmp_path, "arithmetic", train_size=6, test_size=3, difficulty=1, seed=0, fmt="parquet")
    extra = write_jsonl(tmp_path / "extra.jsonl", [row("5-1=")])
    dataset = PromptDataset([paths["train"], paths["test"], extra], tokenizer, max_prompt_length=64)
    assert len(dataset) == 10
    assert [dataset[i]["uid"] for i in range(len(dataset))] == [f"0:{r}" for r in range(6)] + [
        "1:0",
        "1:1",
        "1:2",
        "2:0",
    ]
    assert dataset[6]["env_extras"]["extra_info"]["split"] == "test"
    assert type(dataset[0]["env_extras"]["extra_info"]["index"]) is int


def test_items_play_their_env(tmp_path, tokenizer):
    """A synthetic row, read back from parquet, builds its env by name and the reference answer earns 1.0."""
    paths = write_dataset(tmp_path, "arithmetic", train_size=4, test_size=1, difficulty=1, seed=1, fmt="parquet")
    item = PromptDataset([paths["train"]], tokenizer, max_prompt_length=64)[2]
    env = skyrl_gym.make(item["env_class"], extras=item["env_extras"])
    env.init(item["prompt"])
    assert env.step(item["env_extras"]["extra_info"]["answer"])["reward"] == 1.0


def test_default_env_class_fills_rows_without_one(tmp_path, tokenizer):
    bare = {"prompt": [{"role": "user", "content": "hi"}]}
    path = write_jsonl(tmp_path / "a.jsonl", [bare])
    item = PromptDataset([path], tokenizer, max_prompt_length=64, default_env_class="gsm8k")[0]
    assert item["env_class"] == "gsm8k"
    assert item["env_extras"] == {"data_source": "unknown", "extra_info": {}}
    with pytest.raises(DatasetSchemaError, match=r"a\.jsonl, row 0, column 'env_class': missing"):
        PromptDataset([path], tokenizer, max_prompt_length=64)


def test_schema_errors_name_the_file_and_row_index(tmp_path, tokenizer):
    good = write_jsonl(tmp_path / "good.jsonl", [row("1")])
    bad = write_jsonl(tmp_path / "bad.jsonl", [row("1"), row("2"), {**row("3"), "prompt": []}])
    with pytest.raises(DatasetSchemaError, match=r"bad\.jsonl, row 2, column 'prompt': expected a non-empty list"):
        PromptDataset([good, bad], tokenizer, max_prompt_length=64)


def test_items_are_copies(tmp_path, tokenizer):
    dataset = PromptDataset([write_jsonl(tmp_path / "a.jsonl", [row("1")])], tokenizer, max_prompt_length=64)
    item = dataset[0]
    item["prompt"].append({"role": "assistant", "content": "2"})
    item["env_extras"]["extra_info"]["n"] = 99
    assert dataset[0]["prompt"] == [{"role": "user", "content": "1"}]
    assert dataset[0]["env_extras"]["extra_info"] == {"n": 1}


def test_custom_prompt_key_is_kept_out_of_the_extras(tmp_path, tokenizer):
    custom = {"messages": [{"role": "user", "content": "hi"}], "env_class": "e", "prompt": "raw text"}
    path = write_jsonl(tmp_path / "a.jsonl", [custom])
    item = PromptDataset([path], tokenizer, max_prompt_length=64, prompt_key="messages")[0]
    assert item["prompt"] == [{"role": "user", "content": "hi"}]
    assert item["env_extras"]["prompt"] == "raw text" and "messages" not in item["env_extras"]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_max_prompt_length_must_be_a_positive_integer(tmp_path, tokenizer, bad):
    with pytest.raises(ValueError, match="max_prompt_length must be a positive integer"):
        PromptDataset([tmp_path / "unused.jsonl"], tokenizer, max_prompt_length=bad)


def test_tokenizer_without_chat_template_is_named(tmp_path):
    plain = build_char_tokenizer()
    plain.chat_template = None
    with pytest.raises(ValueError, match="PromptDataset needs a tokenizer with a chat template"):
        PromptDataset([write_jsonl(tmp_path / "a.jsonl", [row("1")])], plain, max_prompt_length=64)


def test_rows_asking_for_an_unavailable_reward_method_are_refused(tmp_path, tokenizer):
    rows = [row("1"), row("2", reward_spec={"method": "reward_model"})]
    path = write_jsonl(tmp_path / "rm.jsonl", rows)
    unsupported = {"reward_model": "no reward model is configured; set reward.model.path"}
    with pytest.raises(
        DatasetSchemaError, match=r"rm\.jsonl, row 1, column 'reward_spec\.method'.*reward\.model\.path"
    ):
        PromptDataset([path], tokenizer, max_prompt_length=64, unsupported_reward_methods=unsupported)
    assert len(PromptDataset([path], tokenizer, max_prompt_length=64)) == 2


def test_the_length_check_keeps_the_kept_prompts_ids_for_the_generator(tmp_path, tokenizer, monkeypatch):
    from skyrl_train.dataset import prompt_dataset
    from skyrl_train.dataset.templating import prompt_token_ids

    path = write_jsonl(tmp_path / "a.jsonl", [row("1"), row("1234567890"), row("12"), row("123")])
    dataset = PromptDataset([path], tokenizer, max_prompt_length=TEMPLATE_OVERHEAD + 5)  # drops the long one
    templated = list(dataset.templated_prompts())
    assert [messages[0]["content"] for messages, _ in templated] == ["1", "12", "123"]
    assert all(ids == prompt_token_ids(tokenizer, messages) for messages, ids in templated)  # what the generator makes
    # past the budget of kept tokens the rest are not kept (the generator templates them when it needs them)
    monkeypatch.setattr(prompt_dataset, "KEPT_PROMPT_TOKENS", 2 * TEMPLATE_OVERHEAD + 3)
    dataset = PromptDataset([path], tokenizer, max_prompt_length=TEMPLATE_OVERHEAD + 5)
    assert [messages[0]["content"] for messages, _ in dataset.templated_prompts()] == ["1", "12"]
