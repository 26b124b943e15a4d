"""Override parsing (Hydra grammar) and application: every value type, +/++/~ forms, key and type errors."""

import pytest

from skyrl_train.config import ConfigError, ConfigTypeError, OverrideSyntaxError, SkyRLConfig, UnknownConfigKeyError
from skyrl_train.config.overrides import apply_overrides, parse_override, resolve_key, to_hydra_override


def build(*overrides: str) -> SkyRLConfig:
    return SkyRLConfig.from_cli_overrides(list(overrides))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("a.b=1", 1),
        ("a.b=-3", -3),
        ("a.b=0.5", 0.5),
        ("a.b=1e-3", 0.001),
        ("a.b=true", True),
        ("a.b=False", False),
        ("a.b=null", None),
        ("a.b=hello", "hello"),
        ("a.b='42'", "42"),
        ("a.b=[a,b]", ["a", "b"]),
        ("a.b=[1, 2.5, null]", [1, 2.5, None]),
        ("a.b={x: 1, y: [2]}", {"x": 1, "y": [2]}),
        ("a.b=s3://bucket/key.parquet", "s3://bucket/key.parquet"),
    ],
)
def test_values_parse_like_hydra(text, value):
    parsed = parse_override(text)
    assert parsed.key == "a.b" and parsed.action == "set"
    assert parsed.value == value and type(parsed.value) is type(value)


@pytest.mark.parametrize(("text", "action"), [("+a=1", "add"), ("++a=1", "force_add"), ("~a", "delete")])
def test_prefixes_select_the_action(text, action):
    assert parse_override(text).action == action


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a.b=~/data", "quote values with special characters"),
        ("a.b=1,2", "comma-separated values"),
        ("hydra.run.dir=.", "configures Hydra itself"),
        ("hydra/job_logging=none", "config group"),
        ("a..b=1", "cannot parse override"),
        ("no_equals_sign", "cannot parse override"),
    ],
)
def test_syntax_errors_say_what_is_wrong(text, message):
    with pytest.raises(OverrideSyntaxError, match=message):
        parse_override(text)


def test_a_single_string_instead_of_a_list_is_rejected():
    with pytest.raises(OverrideSyntaxError, match="list of strings"):
        SkyRLConfig.from_cli_overrides("trainer.seed=1")


def test_every_field_type_is_set_from_an_override():
    # Not validated: megatron and LoRA target modules are type-correct but not supported yet (validation refuses them).
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.seed=3",  # int
            "trainer.policy.optimizer.lr=2e-6",  # float
            "trainer.policy.optimizer.max_grad_norm=2",  # int accepted for float
            "data.shuffle=false",  # bool
            "trainer.project_name=my-project",  # str
            "trainer.max_training_steps=100",  # int | None
            "generator.sampling_params.seed=null",  # Optional set to null
            "trainer.strategy=megatron",  # Literal
            "trainer.algorithm.off_policy_correction.tis_ratio_type=token",  # Literal | None
            "generator.sampling_params.stop=['</answer>', 'Question:']",  # list[str] | None
            "trainer.policy.model.lora.target_modules=[q_proj,v_proj]",  # str | list[str]
            "generator.chat_template_kwargs={enable_thinking: false}",  # dict[str, Any]
            "environment.env_configs.search.topk=5",  # new key in a free-form mapping
        ],
        validate=False,
    )
    assert cfg.trainer.seed == 3
    assert cfg.trainer.policy.optimizer.lr == 2e-6
    assert cfg.trainer.policy.optimizer.max_grad_norm == 2.0
    assert type(cfg.trainer.policy.optimizer.max_grad_norm) is float
    assert cfg.data.shuffle is False
    assert cfg.trainer.project_name == "my-project"
    assert cfg.trainer.max_training_steps == 100
    assert cfg.generator.sampling_params.seed is None
    assert cfg.trainer.strategy == "megatron"
    assert cfg.trainer.algorithm.off_policy_correction.tis_ratio_type == "token"
    assert cfg.generator.sampling_params.stop == ["</answer>", "Question:"]
    assert cfg.trainer.policy.model.lora.target_modules == ["q_proj", "v_proj"]
    assert cfg.generator.chat_template_kwargs == {"enable_thinking": False}
    assert cfg.environment.env_configs == {"search": {"topk": 5}}


def test_quoted_paths_with_tilde_are_accepted():
    cfg = build("data.train_data=['~/a.parquet', \"~/b.jsonl\"]", "trainer.ckpt_path='~/ckpt'")
    assert cfg.data.train_data == ["~/a.parquet", "~/b.jsonl"]
    assert cfg.trainer.ckpt_path == "~/ckpt"


def test_later_overrides_win():
    assert build("trainer.seed=1", "trainer.seed=2").trainer.seed == 2


def test_a_dict_value_merges_into_a_section():
    cfg = build("trainer.placement={colocate_all: false, policy_num_gpus_per_node: 2}")
    assert cfg.trainer.placement.colocate_all is False
    assert cfg.trainer.placement.policy_num_gpus_per_node == 2
    assert cfg.trainer.placement.colocate_policy_ref is True  # untouched keys keep their value


def test_a_dict_value_merges_into_a_free_form_mapping():
    cfg = build("+environment.env_configs.search={topk: 3, timeout: 30}", "environment.env_configs.search={topk: 5}")
    assert cfg.environment.env_configs["search"] == {"topk": 5, "timeout": 30}


def test_delete_restores_a_default_and_removes_a_mapping_key():
    cfg = build("trainer.seed=5", "~trainer.seed", "+environment.env_configs.a.x=1", "~environment.env_configs.a")
    assert cfg.trainer.seed == 42
    assert cfg.environment.env_configs == {}


def test_delete_of_a_missing_key_is_an_error():
    with pytest.raises(ConfigError, match="cannot delete 'environment.env_configs.zzz'"):
        build("~environment.env_configs.zzz")


def test_add_of_an_existing_key_is_an_error_like_hydra():
    with pytest.raises(ConfigError, match=r"'trainer\.seed' already exists.*'\+\+trainer\.seed=\.\.\.'"):
        build("+trainer.seed=3")
    assert build("++trainer.seed=3").trainer.seed == 3


def test_interpolations_resolve_like_hydra():
    cfg = build("trainer.seed=11", "data.seed=${trainer.seed}")
    assert cfg.data.seed == 11


def test_overrides_apply_to_a_given_base():
    base = build("trainer.seed=9")
    assert SkyRLConfig.from_cli_overrides(["data.seed=1"], base=base).trainer.seed == 9


def test_apply_overrides_does_not_modify_its_input():
    data = SkyRLConfig().to_dict()
    apply_overrides(data, [parse_override("trainer.seed=1")], SkyRLConfig)
    assert data["trainer"]["seed"] == 42


def test_unknown_key_names_the_full_path_and_a_close_match():
    with pytest.raises(UnknownConfigKeyError) as info:
        build("trainer.policy.optimizer.learning_rat=1e-5")
    message = str(info.value)
    assert "'trainer.policy.optimizer.learning_rat'" in message
    assert "section 'trainer.policy.optimizer' (OptimizerConfig)" in message
    with pytest.raises(UnknownConfigKeyError, match=r"Did you mean 'trainer\.policy\.optimizer'\?"):
        build("trainer.policy.optimzer.lr=1")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        pytest.param(
            "trainer.n_samples_per_prompt=8",
            r"'trainer\.n_samples_per_prompt'.*'generator\.n_samples_per_prompt'",
            id="in-the-wrong-section-points-to-where-it-lives",
        ),
        pytest.param(
            "data.zzzz=1",
            r"Valid keys here: train_data, val_data, max_prompt_length",
            id="without-a-close-match-lists-the-valid-keys",
        ),
        pytest.param(
            "generator.type=skyrl_agent",
            r"'generator\.type'.*generator\.workflow=skyrl_agent",
            id="named-as-other-frameworks-name-it-points-to-ours",
        ),
        pytest.param(
            "generater.max_turns=2",
            r"'generater'.*the top level.*Did you mean 'generator'",
            id="top-level-section",
        ),
        pytest.param(
            "+trainer.epoch=3",
            r"'trainer\.epoch'.*Did you mean 'trainer\.epochs'",
            id="added-with-plus-gets-a-suggestion-too",
        ),
        pytest.param(
            "trainer.seed.x=1",
            r"'trainer\.seed\.x'.*'trainer\.seed' holds int",
            id="below-a-scalar",
        ),
    ],
)
def test_an_unknown_key_is_refused_with_a_pointer_to_the_right_one(override, message):
    with pytest.raises(UnknownConfigKeyError, match=message):
        build(override)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.train_batch_size=abc", r"'trainer\.train_batch_size': expected int, got str 'abc'"),
        ("trainer.train_batch_size=2.5", r"expected int, got float 2\.5"),
        ("trainer.train_batch_size=true", r"expected int, got bool True"),
        ("trainer.policy.optimizer.lr=fast", r"'trainer\.policy\.optimizer\.lr': expected float, got str 'fast'"),
        ("data.shuffle=1", r"'data\.shuffle': expected bool, got int 1"),
        ("trainer.run_name=42", r"expected str, got int 42 \(quote it to pass a string: trainer\.run_name='42'\)"),
        ("trainer.strategy=fsdp1", r"'trainer\.strategy': expected one of 'fsdp2', 'megatron', got str 'fsdp1'"),
        ("trainer.resume_mode=always", r"expected one of 'none', 'latest', 'path', got str 'always'"),
        ("trainer.max_training_steps=ten", r"expected int \| null, got str 'ten'"),
        ("data.train_data=train.parquet", r"'data\.train_data': expected list\[str\], got str 'train\.parquet'"),
        ("trainer.logger=[wandb,3]", r"item \[1\] is int 3, expected str"),
        ("generator.chat_template_kwargs=[1]", r"expected dict\[str, any value\], got list \[1\]"),
        ("environment.env_configs={search: 3}", r"value of key 'search' is int 3, expected dict\[str, any value\]"),
        ("trainer.placement=5", r"'trainer\.placement': expected a mapping of PlacementConfig fields, got int 5"),
    ],
)
def test_wrong_types_name_the_path_the_expected_type_and_the_value(override, message):
    with pytest.raises(ConfigTypeError, match=message):
        build(override)


def test_resolve_key_reports_free_form_mappings():
    assert resolve_key(SkyRLConfig, "trainer.seed") == (int, False)
    assert resolve_key(SkyRLConfig, "environment.env_configs.search.topk")[1] is True
    assert resolve_key(SkyRLConfig, "environment.env_configs")[1] is True


def test_hydra_form_adds_force_prefix_only_inside_free_form_mappings():
    assert to_hydra_override(parse_override("trainer.seed=1"), SkyRLConfig) == "trainer.seed=1"
    free = parse_override("environment.env_configs.search.topk=5")
    assert to_hydra_override(free, SkyRLConfig) == "++environment.env_configs.search.topk=5"
    added = parse_override("+environment.env_configs.search.topk=5")
    assert to_hydra_override(added, SkyRLConfig) == "+environment.env_configs.search.topk=5"
