"""Row-contract checks: each broken row gets an error naming the file, row, column and what was expected."""

import pytest

from skyrl_train.dataset.schema import DEFAULT_DATA_SOURCE, DatasetSchemaError, validate_row


def good_row(**changes):
    row = {
        "data_source": "synthetic/arithmetic",
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3="}],
        "env_class": "arithmetic",
        "reward_spec": {"method": "rule", "ground_truth": "5"},
        "extra_info": {"index": 0},
    }
    row.update(changes)
    return row


def without(key, **changes):
    row = good_row(**changes)
    del row[key]
    return row


def test_a_good_row_passes_unchanged_and_is_copied():
    row = good_row(difficulty=3)
    checked = validate_row(row, source="train.parquet", index=0)
    assert checked == row
    checked["env_class"] = "other"
    assert row["env_class"] == "arithmetic"


@pytest.mark.parametrize(
    "row, column, expected",
    [
        (without("prompt"), "prompt", "missing; expected a non-empty list of {role, content} messages"),
        (good_row(prompt=[]), "prompt", "expected a non-empty list of {role, content} messages, got [] (list)"),
        (good_row(prompt="2+3="), "prompt", "expected a non-empty list of {role, content} messages, got '2+3=' (str)"),
        (good_row(prompt=["2+3="]), "prompt[0]", "expected a {role, content} message, got '2+3=' (str)"),
        (
            good_row(prompt=[{"role": "user"}]),
            "prompt[0]",
            "message has no 'content' key; expected {role, content} strings",
        ),
        (
            good_row(prompt=[{"content": "hi"}]),
            "prompt[0]",
            "message has no 'role' key; expected {role, content} strings",
        ),
        (
            good_row(prompt=[{"role": "user", "content": 5}]),
            "prompt[0].content",
            "expected a string, got 5 (int)",
        ),
        (
            good_row(prompt=[{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]),
            "prompt[1].role",
            "expected one of ('system', 'user', 'assistant', 'tool'), got 'robot'",
        ),
        (
            without("env_class"),
            "env_class",
            "missing and no default env class was given; add the column or pass default_env_class",
        ),
        (good_row(env_class=None), "env_class", "missing and no default env class was given"),
        (good_row(env_class=7), "env_class", "expected a non-empty string naming a registered env, got 7 (int)"),
        (good_row(data_source=3), "data_source", "expected a string, got 3 (int)"),
        (good_row(reward_spec="5"), "reward_spec", "expected a {method, ground_truth} mapping, got '5' (str)"),
        (
            good_row(reward_spec={"ground_truth": "5"}),
            "reward_spec",
            "has no 'method'; expected one of ('rule', 'reward_model')",
        ),
        (
            good_row(reward_spec={"method": "exact", "ground_truth": "5"}),
            "reward_spec.method",
            "expected one of ('rule', 'reward_model'), got 'exact'",
        ),
        (
            good_row(reward_spec={"method": "rule"}),
            "reward_spec.ground_truth",
            "method 'rule' needs a ground_truth (missing or null)",
        ),
        (
            good_row(reward_spec={"method": "rule", "ground_truth": None}),
            "reward_spec.ground_truth",
            "method 'rule' needs a ground_truth (missing or null)",
        ),
        (good_row(extra_info=[1, 2]), "extra_info", "expected a mapping, got [1, 2] (list)"),
        ("not a row", "<row>", "expected a mapping of column names to values, got 'not a row' (str)"),
    ],
)
def test_each_broken_row_names_file_row_column_and_expectation(row, column, expected):
    with pytest.raises(DatasetSchemaError) as caught:
        validate_row(row, source="data/train.jsonl", index=17)
    message = str(caught.value)
    assert message.startswith(f"data/train.jsonl, row 17, column '{column}': ")
    assert expected in message
    assert (caught.value.source, caught.value.index, caught.value.column) == ("data/train.jsonl", 17, column)


def test_schema_error_is_a_value_error():
    with pytest.raises(ValueError):
        validate_row(without("prompt"), source="f", index=0)


def test_default_env_class_fills_missing_or_null_but_never_overrides():
    assert validate_row(without("env_class"), source="f", index=0, default_env_class="gsm8k")["env_class"] == "gsm8k"
    assert (
        validate_row(good_row(env_class=None), source="f", index=0, default_env_class="gsm8k")["env_class"] == "gsm8k"
    )
    assert validate_row(good_row(), source="f", index=0, default_env_class="gsm8k")["env_class"] == "arithmetic"


def test_missing_optional_columns_get_defaults():
    row = {"prompt": [{"role": "user", "content": "hi"}], "env_class": "e", "extra_info": None}
    checked = validate_row(row, source="f", index=0)
    assert checked == {**row, "data_source": DEFAULT_DATA_SOURCE, "extra_info": {}}


def test_reward_model_method_needs_no_ground_truth():
    row = good_row(reward_spec={"method": "reward_model"})
    assert validate_row(row, source="f", index=0)["reward_spec"] == {"method": "reward_model"}


def test_custom_prompt_and_env_class_keys():
    row = {"messages": [{"role": "user", "content": "hi"}], "env": "e"}
    checked = validate_row(row, source="f", index=0, prompt_key="messages", env_class_key="env")
    assert checked["env"] == "e"
    with pytest.raises(DatasetSchemaError, match="column 'messages': missing"):
        validate_row({"prompt": row["messages"], "env": "e"}, source="f", index=0, prompt_key="messages")


def test_a_method_the_run_cannot_score_is_refused_naming_the_row():
    row = good_row(reward_spec={"method": "reward_model"})
    unsupported = {"reward_model": "no reward model is configured; set reward.model.path"}
    with pytest.raises(
        DatasetSchemaError,
        match=r"f, row 3, column 'reward_spec.method': 'reward_model' is not available in this run: no reward model",
    ):
        validate_row(row, source="f", index=3, unsupported_reward_methods=unsupported)
    rule_row = good_row()
    assert validate_row(rule_row, source="f", index=0, unsupported_reward_methods=unsupported) == rule_row
