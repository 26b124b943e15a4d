"""NovaSky-AI/SkyRL's config keys and values (both layouts) are accepted with upstream's meaning or refused by name.

The upstream keys and values are written here as data (the table of issue 47 and the key map of the migration
study); nothing is read from an upstream checkout. `test_upstream_meanings.py` covers keys that mean something
else here, `test_no_dead_keys.py` that every translated key lands on a key the code reads.
"""

import warnings

import pytest

from skyrl_train.config import ConfigError, SkyRLConfig, UnknownConfigKeyError
from skyrl_train.config.errors import UnsupportedFeatureError
from skyrl_train.config.overrides import parse_overrides
from skyrl_train.config.upstream import translate_mapping, translate_overrides

ENGINE = "generator.inference_engine"


def build(*overrides: str) -> SkyRLConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SkyRLConfig.from_cli_overrides(list(overrides))


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        build(*overrides)
    return str(info.value)


# (upstream overrides, {our key: expected value}) for each row of the table and the study's key map
ACCEPTED = [
    (["trainer.max_prompt_length=1024"], {"data.max_prompt_length": 1024}),
    (
        [
            "trainer.policy.optimizer_config.lr=3e-6",
            "trainer.policy.optimizer_config.weight_decay=0.1",
            "trainer.policy.optimizer_config.max_grad_norm=0.5",
            "trainer.policy.optimizer_config.num_warmup_steps=7",
            "trainer.policy.optimizer_config.adam_betas=[0.9,0.95]",
            "trainer.policy.optimizer_config.scheduler=cosine",
            "trainer.policy.optimizer_config.offload_after_step=false",
            "trainer.critic.optimizer_config.lr=2e-5",
        ],
        {
            "trainer.policy.optimizer.lr": 3e-6,
            "trainer.policy.optimizer.weight_decay": 0.1,
            "trainer.policy.optimizer.max_grad_norm": 0.5,
            "trainer.policy.optimizer.num_warmup_steps": 7,
            "trainer.policy.optimizer.adam_betas": [0.9, 0.95],
            "trainer.policy.optimizer.scheduler": "cosine",
            "trainer.policy.optimizer.offload_after_step": False,
            "trainer.critic.optimizer.lr": 2e-5,
        },
    ),
    (["trainer.resume_mode=null"], {"trainer.resume_mode": "none"}),
    (["trainer.resume_mode=from_path", "trainer.resume_path=/ckpt/global_step_3"], {"trainer.resume_mode": "path"}),
    (["trainer.strategy=fsdp"], {"trainer.strategy": "fsdp2"}),
    (
        [
            "trainer.strategy=megatron",
            "trainer.placement.policy_num_gpus_per_node=4",
            "trainer.placement.ref_num_gpus_per_node=4",
            "generator.inference_engine.num_engines=4",
            "trainer.policy.megatron_config.tensor_model_parallel_size=2",
            "trainer.policy.megatron_config.expert_model_parallel_size=2",
            "trainer.policy.megatron_config.expert_tensor_parallel_size=1",
            "trainer.ref.megatron_config.tensor_model_parallel_size=4",
            "trainer.ref.megatron_config.pipeline_model_parallel_size=1",
            "trainer.ref.megatron_config.context_parallel_size=1",
        ],
        {
            "trainer.policy.megatron.tensor_model_parallel_size": 2,
            "trainer.policy.megatron.expert_model_parallel_size": 2,
            "trainer.policy.megatron.expert_tensor_parallel_size": 1,
            "trainer.ref.megatron.tensor_model_parallel_size": 4,
        },
    ),
    (
        [
            "environment.skyrl_gym.max_env_workers=16",
            "environment.skyrl_gym.search.search_url=http://127.0.0.1:8000/retrieve",
            "environment.skyrl_gym.search.topk=5",
            "environment.skyrl_gym.search.log_requests=false",
            "environment.skyrl_gym.text2sql.db_path=/data/sql",
        ],
        {
            "environment.max_env_workers": 16,
            "environment.env_configs": {
                "search": {"search_url": "http://127.0.0.1:8000/retrieve", "topk": 5, "log_requests": False},
                "text2sql": {"db_path": "/data/sql"},
            },
        },
    ),
    (["generator.use_conversation_multi_turn=true"], {"generator.use_conversation_multi_turn": True}),
    (["generator.use_conversation_multi_turn=false"], {"generator.use_conversation_multi_turn": False}),
    (["trainer.dump_data_batch=false"], {"trainer.dump_data_batch": False}),
    (["trainer.dump_data_batch=true"], {"trainer.dump_data_batch": True}),
    (
        [
            "trainer.policy.fsdp_config.cpu_offload=true",
            "trainer.policy.fsdp_config.fsdp_size=2",
            "trainer.policy.fsdp_config.reshard_after_forward=false",
            "trainer.ref.fsdp_config.cpu_offload=true",
            "trainer.critic.fsdp_config.cpu_offload=true",
            "trainer.policy.fsdp_config.mixed_precision.param_dtype=fp32",
        ],
        {
            "trainer.policy.fsdp.cpu_offload": True,
            "trainer.policy.fsdp.fsdp_size": 2,
            "trainer.policy.fsdp.reshard_after_forward": False,
            "trainer.ref.fsdp.cpu_offload": True,
            "trainer.critic.fsdp.cpu_offload": True,
            "trainer.policy.fsdp.mixed_precision.param_dtype": "float32",
        },
    ),
    (
        [
            "trainer.strategy=megatron",
            "trainer.policy.megatron_config.moe_router_score_function=sigmoid",
            "trainer.policy.megatron_config.transformer_config_kwargs.moe_router_enable_expert_bias=true",
            "trainer.ref.megatron_config.transformer_config_kwargs.moe_router_score_function=softmax",
        ],
        {
            "trainer.policy.megatron.moe_router_score_function": "sigmoid",
            "trainer.policy.megatron.moe_router_enable_expert_bias": True,
            "trainer.ref.megatron.moe_router_score_function": "softmax",
        },
    ),
    (["trainer.flash_attn=true"], {}),
    (["generator.async_engine=false", "generator.batched=true"], {"generator.batched": True}),
    (
        [
            "trainer.policy.megatron_config.transformer_config_kwargs={recompute_granularity: full,"
            " recompute_modules: [core_attn], recompute_method: uniform, recompute_num_layers: 1}",
            "trainer.policy.megatron_config.optimizer_config_kwargs.optimizer_cpu_offload=false",
        ],
        {"trainer.policy.gradient_checkpointing": "auto"},  # recompute as upstream's whenever checkpointing is on
    ),
    (["trainer.flash_attn=false"], {}),
    (["trainer.policy.model.lora.init_method=kaiming"], {}),
    (
        [
            "trainer.policy.torch_profiler_config.enable=false",
            "trainer.policy.torch_profiler_config.ranks=[0]",
            "trainer.policy.torch_profiler_config.save_path=/tmp/prof",
        ],
        {},
    ),
    (
        [
            "trainer.algorithm.policy_loss_type=cispo",
            "trainer.algorithm.cispo.cispo_eps_clip_low=0.5",
            "trainer.algorithm.cispo.cispo_eps_clip_high=3",
        ],
        {"trainer.algorithm.cispo.eps_clip_low": 0.5, "trainer.algorithm.cispo.eps_clip_high": 3.0},
    ),
    (["trainer.algorithm.kl_cov.ppo_kl_coef=0.5"], {"trainer.algorithm.kl_cov.kl_cov_coef": 0.5}),
    (
        ["trainer.gradient_checkpointing=false", "trainer.critic.model.path=some/critic"],
        {"trainer.policy.gradient_checkpointing": False, "trainer.critic.gradient_checkpointing": False},
    ),
    (["generator.append_eos_token_after_stop_str_in_multi_turn=true"], {}),
    (
        [
            f"{ENGINE}.run_engines_locally=false",
            f"{ENGINE}.external_proxy_url=http://127.0.0.1:8000",
            f"{ENGINE}.external_server_urls=['http://127.0.0.1:8001','http://127.0.0.1:8002']",
            f"{ENGINE}.backend=vllm",
            "trainer.placement.colocate_all=false",
        ],
        {
            f"{ENGINE}.backend": "remote",
            f"{ENGINE}.remote_urls": ["http://127.0.0.1:8001", "http://127.0.0.1:8002"],
            f"{ENGINE}.num_engines": 2,
        },
    ),
    ([f"{ENGINE}.run_engines_locally=true"], {f"{ENGINE}.backend": "hf"}),
    ([f"{ENGINE}.distributed_executor_backend=mp", f"{ENGINE}.data_parallel_size=1"], {}),
    ([f"{ENGINE}.enable_pd=false", f"{ENGINE}.num_prefill=0"], {}),
    ([f"{ENGINE}.weight_sync_backend=nccl"], {f"{ENGINE}.weight_sync_backend": "auto"}),
    ([f"{ENGINE}.engine_init_kwargs.max_model_len=4096"], {f"{ENGINE}.engine_init_kwargs": {"max_model_len": 4096}}),
    # legacy layout: flat generator keys (an engine with tensor parallelism: sglang in its own GPUs, see docs/gpu.md)
    (
        [
            "generator.backend=sglang",
            "trainer.device=cuda",
            "trainer.placement.colocate_all=false",
            "generator.num_inference_engines=2",
            "generator.inference_engine_tensor_parallel_size=2",
            "generator.gpu_memory_utilization=0.6",
            "generator.weight_sync_backend=nccl",
            "generator.async_engine=true",
            "generator.enforce_eager=true",
            "generator.run_engines_locally=true",
            "trainer.placement.policy_num_gpus_per_node=4",
            "trainer.placement.ref_num_gpus_per_node=4",
            "+generator.engine_init_kwargs.max_model_len=2048",
        ],
        {
            f"{ENGINE}.backend": "sglang",
            f"{ENGINE}.num_engines": 2,
            f"{ENGINE}.tensor_parallel_size": 2,
            f"{ENGINE}.gpu_memory_utilization": 0.6,
            f"{ENGINE}.weight_sync_backend": "auto",
            f"{ENGINE}.enforce_eager": True,
            f"{ENGINE}.engine_init_kwargs": {"max_model_len": 2048},
        },
    ),
    (
        [
            "generator.run_engines_locally=false",
            "generator.remote_inference_engine_urls=['127.0.0.1:8001']",
            "trainer.placement.colocate_all=false",
        ],
        {f"{ENGINE}.backend": "remote", f"{ENGINE}.remote_urls": ["http://127.0.0.1:8001"], f"{ENGINE}.num_engines": 1},
    ),
    (["generator.remote_inference_engine_urls=['127.0.0.1:8001']"], {f"{ENGINE}.backend": "hf"}),
    (
        [
            "generator.enable_http_endpoint=true",
            "generator.http_endpoint_host=0.0.0.0",
            "generator.http_endpoint_port=8001",
            "generator.served_model_name=my-model",
        ],
        {
            "generator.http_endpoint.enabled": True,
            "generator.http_endpoint.host": "0.0.0.0",
            "generator.http_endpoint.port": 8001,
            "generator.http_endpoint.served_model_name": "my-model",
        },
    ),
    (
        [
            "+trainer.algorithm.overlong_buffer.len=512",
            "+trainer.algorithm.overlong_buffer.penalty_factor=0.5",
            "generator.sampling_params.max_generate_length=1024",
        ],
        {
            "trainer.algorithm.overlong_buffer.enabled": True,
            "trainer.algorithm.overlong_buffer.length": 512,
            "trainer.algorithm.overlong_buffer.penalty_factor": 0.5,
        },
    ),
    (
        ["trainer.algorithm.overlong_buffer_len=256", "trainer.algorithm.overlong_buffer_penalty_factor=2.0"],
        {"trainer.algorithm.overlong_buffer.length": 256, "trainer.algorithm.overlong_buffer.enabled": True},
    ),
    (
        ["trainer.algorithm.use_tis=true", "trainer.algorithm.tis_imp_ratio_cap=3.0"],
        {
            "trainer.algorithm.off_policy_correction.tis_ratio_type": "token",
            "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high": 3.0,
        },
    ),
    (
        [
            "trainer.fully_async.enabled=true",
            "trainer.fully_async.max_staleness_steps=3",
            "trainer.placement.colocate_all=false",
        ],
        {"trainer.mode": "fully_async", "trainer.async_rl.max_staleness": 3},
    ),
    (
        [
            f"{ENGINE}.weight_sync_backend=delta",
            f"{ENGINE}.delta_weight_sync.sync_dir=gs://bucket/run",
            f"{ENGINE}.delta_weight_sync.publish_staging_dir=",
            f"{ENGINE}.delta_weight_sync.checkpoint_load_format=vllm_fastsafetensors",
            f"{ENGINE}.delta_weight_sync.multi_thread_safetensors_max_workers=8",
        ],
        {
            f"{ENGINE}.weight_sync_backend": "delta",
            f"{ENGINE}.delta_weight_sync.sync_dir": "gs://bucket/run",
            f"{ENGINE}.delta_weight_sync.publish_staging_dir": "",
        },
    ),
    (["data.dataloader.num_workers=null", "data.dataloader.persistent_workers=false"], {"data.num_workers": 0}),
    (["trainer.bf16=false"], {"trainer.policy.fsdp.mixed_precision.param_dtype": "float32"}),
]


def value_at(cfg: SkyRLConfig, key: str):
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("overrides, expected", ACCEPTED, ids=[o[0] for o, _ in ACCEPTED])
def test_upstream_keys_are_accepted_with_upstream_meaning(overrides, expected):
    cfg = build(*overrides)
    for key, value in expected.items():
        assert value_at(cfg, key) == value, key


# (upstream override, words the refusal must contain): refused as not supported here, naming the feature
REFUSED = [
    ("trainer.policy.model.lora.init_method=gaussian", "LoRA initialisations other than kaiming"),
    ("trainer.policy.torch_profiler_config.enable=true", "the torch profiler"),
    ("generator.append_eos_token_after_stop_str_in_multi_turn=false", "without an eos after a stop string"),
    (f"{ENGINE}.data_parallel_size=2", "data parallelism inside one inference engine"),
    (f"{ENGINE}.enable_pd=true", "prefill/decode (PD) disaggregation"),
    (f"{ENGINE}.enable_return_routed_experts=true", "routed-expert replay (R3)"),
    ("trainer.policy.megatron_config.moe_enable_routing_replay=true", "routed-expert replay (R3)"),
    ("trainer.policy.megatron_config.lora_config.lora_type=lora", "fused LoRA adapters"),
    ("trainer.mtp.enabled=true", "multi-token-prediction (MTP)"),
    ("generator.vision_language_generator=true", "vision-language (VLM) rollouts"),
    (
        "trainer.policy.megatron_config.transformer_config_kwargs.recompute_granularity=selective",
        "activation recompute",
    ),
    ("trainer.strategy=deepspeed", "the DeepSpeed strategy"),
    (f"{ENGINE}.run_engines_locally=false", "external servers without their URLs"),
]


@pytest.mark.parametrize("override, feature", REFUSED, ids=[o for o, _ in REFUSED])
def test_unimplemented_upstream_features_are_refused_by_name(override, feature):
    message = refusal(override)
    assert feature in message and "is not supported here" in message
    assert "unknown" not in message and "Did you mean" not in message


def test_every_problem_is_listed_at_once_with_the_replacement():
    overrides = [
        "trainer.epoch=2",  # a typo: the close match is right
        "generator.foo=1",
        "trainer.seed=abc",
        "trainer.strategy=fsdp1",
        f"{ENGINE}.enable_pd=true",
        "generator.backend=vllm",  # upstream spelling: accepted, not a problem
        "trainer.max_prompt_length=256",
    ]
    with pytest.raises(ConfigError) as info:
        SkyRLConfig.from_cli_overrides(overrides)
    message = str(info.value)
    assert message.startswith("5 problems in the config:")
    assert "'trainer.epoch'" in message and "Did you mean 'trainer.epochs'" in message
    assert "'generator.foo'" in message
    assert "'trainer.seed': expected int, got str 'abc'" in message
    assert "got str 'fsdp1'" in message
    assert "prefill/decode (PD) disaggregation is not supported here" in message
    assert "generator.backend" not in message and "max_prompt_length" not in message


@pytest.mark.parametrize(
    "override",
    [
        "generator.backend=sglang",
        f"{ENGINE}.run_engines_locally=true",
        f"{ENGINE}.data_parallel_size=1",
        f"{ENGINE}.enable_pd=false",
        "trainer.algorithm.tis_imp_ratio_cap=2.0",
        "generator.num_inference_engines=2",
        "environment.skyrl_gym.search.topk=3",
    ],
)
def test_keys_the_study_saw_misdirected_are_translated_not_suggested(override):
    translation = translate_overrides(parse_overrides([override]))
    assert not translation.problems
    assert translation.applied and translation.applied[0].given == override


def test_a_single_problem_keeps_its_own_type():
    with pytest.raises(UnknownConfigKeyError, match=r"Did you mean 'trainer\.epochs'"):
        SkyRLConfig.from_cli_overrides(["trainer.epoch=2"])
    with pytest.raises(UnsupportedFeatureError, match="the DeepSpeed strategy is not supported here"):
        SkyRLConfig.from_cli_overrides(["trainer.strategy=deepspeed"])


def test_a_key_renamed_into_a_section_without_that_field_names_both_spellings():
    message = refusal("trainer.policy.optimizer_config.momentum=0.9")
    assert "'trainer.policy.optimizer_config.momentum' is SkyRL's spelling of 'trainer.policy.optimizer.momentum'" in (
        message
    )


def test_plus_on_an_existing_key_stays_an_error_except_for_the_keys_skyrl_added_with_plus():
    assert "already exists" in refusal("+trainer.seed=1")
    assert (
        build("+trainer.algorithm.overlong_buffer.penalty_factor=0.5").trainer.algorithm.overlong_buffer.penalty_factor
        == 0.5
    )
    step_wise = ("generator.max_turns=3", "generator.step_wise_trajectories=true", "generator.batched=false")
    assert build(*step_wise, "+generator.retokenize_chat_history=true").generator.retokenize_chat_history is True


def test_a_section_given_as_a_dict_in_upstream_spelling_is_translated_key_by_key():
    cfg = build(
        "trainer.policy.optimizer_config={lr: 4e-6, weight_decay: 0.0}", "trainer.policy.fsdp_config={fsdp_size: 2}"
    )
    assert cfg.trainer.policy.optimizer.lr == 4e-6 and cfg.trainer.policy.optimizer.weight_decay == 0.0
    assert cfg.trainer.policy.fsdp.fsdp_size == 2


def test_the_translation_lists_what_it_did_and_announces_strategy_fsdp_once():
    translation = translate_overrides(
        parse_overrides(["trainer.strategy=fsdp", "generator.backend=vllm", "generator.async_engine=true"])
    )
    described = translation.describe()
    assert "trainer.strategy=fsdp -> trainer.strategy='fsdp2'" in described
    assert "generator.backend=vllm -> generator.inference_engine.backend=vllm" in described
    assert "generator.async_engine=true -> accepted, nothing to set: engines are asynchronous either way" in described
    assert len(translation.notes) == 1 and "FSDP2" in translation.notes[0]
    assert translation.speaks_skyrl and translation.legacy


def test_a_config_in_this_projects_spelling_is_left_alone():
    translation = translate_overrides(parse_overrides(["trainer.seed=3", "generator.inference_engine.backend=hf"]))
    assert not translation.applied and not translation.speaks_skyrl
    data = SkyRLConfig().to_dict()
    translated, found = translate_mapping(data, SkyRLConfig)
    assert translated == data and not found.applied


def test_a_nested_dict_in_upstream_layout_builds_like_the_overrides():
    upstream = {
        "trainer": {
            "strategy": "fsdp",
            "max_prompt_length": 300,
            "policy": {"optimizer_config": {"lr": 5e-6}, "fsdp_config": {"cpu_offload": True}},
        },
        "generator": {"backend": "vllm", "num_inference_engines": 1, "async_engine": True},
        "environment": {"skyrl_gym": {"max_env_workers": 4, "search": {"topk": 2}}},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = SkyRLConfig.from_dict(upstream)
    assert cfg.trainer.strategy == "fsdp2" and cfg.data.max_prompt_length == 300
    assert cfg.trainer.policy.optimizer.lr == 5e-6 and cfg.trainer.policy.fsdp.cpu_offload is True
    assert cfg.generator.inference_engine.backend == "vllm"
    assert cfg.environment.max_env_workers == 4 and cfg.environment.env_configs == {"search": {"topk": 2}}


def test_fully_async_generation_workers_below_the_staleness_bound_are_refused():
    base = [
        "trainer.fully_async.enabled=true",
        "trainer.fully_async.max_staleness_steps=2",
        "trainer.placement.colocate_all=false",
        "trainer.train_batch_size=8",
        "trainer.policy_mini_batch_size=8",
    ]
    assert build(*base, "trainer.fully_async.num_parallel_generation_workers=24").trainer.mode == "fully_async"
    message = refusal(*base, "trainer.fully_async.num_parallel_generation_workers=10")
    assert "capping concurrent generation" in message and "is not supported here" in message


def test_the_command_line_lists_cross_field_problems_and_registry_names_together(capsys):
    from skyrl_train.config.cli import run_cli

    with pytest.raises(SystemExit) as info:
        run_cli(None, ["trainer.algorithm.policy_loss_type=dppo", "trainer.train_batch_size=100", "--dry-run"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid config (2 problem(s))" in err
    assert "must be divisible by trainer.policy_mini_batch_size" in err
    assert "'dppo' is SkyRL's DPPO loss, which is not supported here" in err


def test_a_transformer_config_kwargs_router_key_is_translated_once():
    override = "trainer.policy.megatron_config.transformer_config_kwargs.moe_router_enable_expert_bias=false"
    described = translate_overrides(parse_overrides([override])).describe()
    assert described.count(f"{override} -> trainer.policy.megatron.moe_router_enable_expert_bias=false") == 1
