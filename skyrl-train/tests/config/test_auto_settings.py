"""`auto` speed settings: what each rule picks on CPU and on CUDA inputs, and that a run's config gets the picks."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.auto_settings import (
    BF16_CPU_MIN_PARAMETERS,
    Machine,
    ModelFacts,
    auto_keys,
    cpu_bf16_flag,
    describe_choices,
    read_model_facts,
    resolve_auto_settings,
)
from skyrl_train.config.cli import render_resolved_config
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model

GIB = 2**30
# ModelFacts(num_parameters, num_layers, hidden_size, intermediate_size, vocab_size, source)
TINY = ModelFacts(410_000, 2, 128, 384, 128, "test")
MEDIUM = ModelFacts(25_000_000, 8, 512, 1536, 128, "test")
QWEN_1_5B = ModelFacts(1_540_000_000, 28, 1536, 8960, 151_936, "test")
QWEN_7B = ModelFacts(7_620_000_000, 28, 3584, 18944, 152_064, "test")
CPU_HOST = Machine("cpu", 24 * GIB, "host memory")
BF16_CPU_HOST = Machine("cpu", 24 * GIB, "host memory", cpu_bf16="avx512_bf16")
H100 = Machine("cuda", 80 * GIB, "GPU 0 (H100)")
SMALL_GPU = Machine("cuda", 24 * GIB, "GPU 0 (L4)")


def _resolve(facts, machine, *overrides):
    cfg = SkyRLConfig.from_cli_overrides(["trainer.policy.model.path=model", *overrides], validate=False)
    resolved, choices = resolve_auto_settings(cfg, machine, facts_of=lambda path: (facts, "not readable in test"))
    return resolved, {choice.key: choice for choice in choices}


def _two_ranks(*overrides):
    return (
        "trainer.placement.policy_num_gpus_per_node=2",
        "generator.inference_engine.num_engines=2",
        "trainer.algorithm.use_kl_loss=false",
        *overrides,
    )


QUICKSTART_SHAPE = (
    "data.max_prompt_length=64",
    "generator.sampling_params.max_generate_length=8",
    "trainer.train_batch_size=32",
    "trainer.policy_mini_batch_size=16",
    "generator.n_samples_per_prompt=8",
)


def test_a_small_model_on_cpu_gets_the_quickstart_speed_settings():
    cfg, choices = _resolve(TINY, CPU_HOST, *_two_ranks(*QUICKSTART_SHAPE))
    policy = cfg.trainer.policy
    # exactly what examples/quickstart sets by hand
    assert policy.fsdp.reshard_after_forward is False and policy.fsdp.shard_layers is False
    assert policy.fsdp.mixed_precision.param_dtype == "float32" and policy.gradient_checkpointing is False
    assert cfg.trainer.micro_train_batch_size_per_gpu == 64 == cfg.trainer.micro_forward_batch_size_per_gpu
    assert cfg.generator.inference_engine.model_dtype == "float32" and cfg.generator.batched is True
    assert "gloo collectives do not overlap compute" in choices["trainer.policy.fsdp.shard_layers"].reason
    assert "the whole shard" in choices["trainer.micro_train_batch_size_per_gpu"].reason
    assert auto_keys(cfg) == []


def test_a_cpu_with_native_bfloat16_computes_a_large_enough_model_in_bfloat16():
    cfg, choices = _resolve(MEDIUM, BF16_CPU_HOST, *_two_ranks(*QUICKSTART_SHAPE))
    assert cfg.trainer.policy.fsdp.mixed_precision.param_dtype == "bfloat16"
    assert cfg.generator.inference_engine.model_dtype == "bfloat16"  # the engine follows the policy
    reason = choices["trainer.policy.fsdp.mixed_precision.param_dtype"].reason
    assert "avx512_bf16" in reason and "25.0 M parameters" in reason
    # the other choices are made for the dtype picked: a full copy of 25 M bfloat16 parameters is 48 MiB
    assert "48 MiB in bfloat16" in choices["trainer.policy.fsdp.reshard_after_forward"].reason


@pytest.mark.parametrize(
    "facts, machine, why",
    [
        (TINY, BF16_CPU_HOST, "under 5 M parameters"),
        (ModelFacts(BF16_CPU_MIN_PARAMETERS - 1, 4, 256, 768, 128, "test"), BF16_CPU_HOST, "under 5 M parameters"),
        (None, BF16_CPU_HOST, "model size unknown"),
        (MEDIUM, CPU_HOST, "without native bfloat16"),
    ],
)
def test_small_models_and_cpus_without_native_bfloat16_stay_float32(facts, machine, why):
    cfg, choices = _resolve(facts, machine, *_two_ranks(*QUICKSTART_SHAPE))
    assert cfg.trainer.policy.fsdp.mixed_precision.param_dtype == "float32"
    assert cfg.generator.inference_engine.model_dtype == "float32"
    assert why in choices["trainer.policy.fsdp.mixed_precision.param_dtype"].reason


def test_a_model_at_the_threshold_computes_in_bfloat16():
    facts = ModelFacts(BF16_CPU_MIN_PARAMETERS, 4, 256, 768, 128, "test")
    cfg, _ = _resolve(facts, BF16_CPU_HOST, *_two_ranks(*QUICKSTART_SHAPE))
    assert cfg.trainer.policy.fsdp.mixed_precision.param_dtype == "bfloat16"


def test_a_dtype_set_by_hand_wins_on_a_bfloat16_cpu():
    cfg, choices = _resolve(
        MEDIUM, BF16_CPU_HOST, *_two_ranks(*QUICKSTART_SHAPE, "trainer.policy.fsdp.mixed_precision.param_dtype=float32")
    )
    assert cfg.trainer.policy.fsdp.mixed_precision.param_dtype == "float32"
    assert cfg.generator.inference_engine.model_dtype == "float32"
    assert "trainer.policy.fsdp.mixed_precision.param_dtype" not in choices


@pytest.mark.parametrize(
    "cpuinfo, flag",
    [
        ("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni\n", "avx512_bf16"),
        ("flags\t\t: fpu avx512_bf16 amx_bf16 amx_tile\n", "amx_bf16"),
        ("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n", "bf16"),
        ("flags\t\t: fpu sse2 avx2 avx512f avx512bw\n", None),
        ("model name\t: avx512_bf16 in a name is not a flag\n", None),
    ],
)
def test_the_cpu_bfloat16_flag_is_read_from_cpuinfo(tmp_path, cpuinfo, flag):
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo)
    assert cpu_bf16_flag(path) == flag
    assert cpu_bf16_flag(tmp_path / "missing") is None


def test_a_lora_policy_keeps_a_small_model_gathered_like_a_full_fine_tune():
    # `auto` used to reshard after every forward for LoRA: kept gathered, the frozen base of a no-grad forward
    # (reference log-probs with the adapters off) left the next training forward with no gradient path. The reshard
    # after a gradient-free forward removed the cause (tests/workers/test_data_parallel_loss.py, the LoRA case).
    cfg, choices = _resolve(TINY, CPU_HOST, *_two_ranks(*QUICKSTART_SHAPE, "trainer.policy.model.lora.rank=4"))
    assert cfg.trainer.policy.fsdp.reshard_after_forward is False
    assert "is at most" in choices["trainer.policy.fsdp.reshard_after_forward"].reason
    assert cfg.trainer.policy.fsdp.shard_layers is False


def test_gpu_defaults_stay_gpu_defaults():
    cfg, choices = _resolve(
        QWEN_1_5B,
        H100,
        "trainer.placement.policy_num_gpus_per_node=8",
        "generator.inference_engine.num_engines=8",
        "data.max_prompt_length=1024",
        "generator.sampling_params.max_generate_length=3072",
    )
    policy = cfg.trainer.policy
    assert policy.fsdp.mixed_precision.param_dtype == "bfloat16"
    assert cfg.generator.inference_engine.model_dtype == "bfloat16"
    assert policy.fsdp.shard_layers is True  # per-layer units overlap their all-gathers with compute
    assert "overlaps" in choices["trainer.policy.fsdp.shard_layers"].reason
    # 3 GB of bf16 parameters is under 10 % of 80 GB: gathered once per micro-batch
    assert policy.fsdp.reshard_after_forward is False
    # 256 * 5 / 8 = 160 rows of 4096 tokens: far too many activations without recomputation
    assert policy.gradient_checkpointing is True
    micro = cfg.trainer.micro_train_batch_size_per_gpu
    assert 160 % micro == 0 and 1 <= micro * 4096 <= 16384
    assert cfg.generator.batched is True


def test_a_large_model_on_a_small_gpu_reshards_after_forward():
    cfg, choices = _resolve(QWEN_7B, SMALL_GPU, "trainer.placement.policy_num_gpus_per_node=8")
    assert cfg.trainer.policy.fsdp.reshard_after_forward is True
    assert "exceeds 10%" in choices["trainer.policy.fsdp.reshard_after_forward"].reason


def test_a_small_gpu_run_skips_checkpointing_when_the_shard_fits():
    cfg, choices = _resolve(MEDIUM, H100, *_two_ranks(*QUICKSTART_SHAPE))
    assert cfg.trainer.policy.gradient_checkpointing is False
    assert "within 25% of the GPU's" in choices["trainer.policy.gradient_checkpointing"].reason


@pytest.mark.parametrize("machine", [CPU_HOST, H100])
def test_one_rank_never_reshards_and_keeps_one_unit(machine):
    cfg, choices = _resolve(QWEN_7B, machine)
    assert cfg.trainer.policy.fsdp.reshard_after_forward is False and cfg.trainer.policy.fsdp.shard_layers is False
    assert choices["trainer.policy.fsdp.shard_layers"].reason.startswith("one rank")


@pytest.mark.parametrize("machine", [CPU_HOST, Machine("cuda", None, "no GPU visible to this process")])
def test_unknown_size_or_memory_takes_the_conservative_choices(machine):
    facts = None if machine.device == "cpu" else QWEN_1_5B
    cfg, choices = _resolve(facts, machine, *_two_ranks("data.max_prompt_length=512"))
    assert cfg.trainer.policy.fsdp.reshard_after_forward is True and cfg.trainer.policy.fsdp.shard_layers is True
    # 4096-token budget over 512 + 1024 tokens: 2 rows of the 640-row shard
    assert cfg.trainer.micro_train_batch_size_per_gpu == 2
    assert "unknown" in choices["trainer.micro_train_batch_size_per_gpu"].reason
    assert cfg.trainer.policy.gradient_checkpointing is (machine.device == "cuda")


@pytest.mark.parametrize(
    ("prompts", "samples", "micro"),
    [
        (12, 8, 16),  # 12 prompts x 8 samples / 1 rank = 96 rows of at most 1000 tokens; 16384 // 1000 = 16 divides 96
        (9, 10, 15),  # 16 rows would fit 16 * 1000 < 16384 but the largest divisor of 90 within 16 is 15
    ],
)
def test_the_micro_batch_divides_the_shard_and_fits_the_budget(prompts, samples, micro):
    cfg, _ = _resolve(
        MEDIUM,
        Machine("cpu", 1024 * GIB, "host memory"),
        "data.max_prompt_length=200",
        "generator.sampling_params.max_generate_length=800",
        f"trainer.train_batch_size={prompts}",
        f"trainer.policy_mini_batch_size={prompts}",
        f"generator.n_samples_per_prompt={samples}",
    )
    assert cfg.trainer.micro_train_batch_size_per_gpu == micro


def test_the_token_budget_shrinks_with_the_memory_share():
    # 25 M parameters at ~370 KiB of activations a token: 25 % of 2 GiB holds ~1400 tokens -> 4 rows of 330
    cfg, choices = _resolve(
        MEDIUM,
        Machine("cpu", 8 * GIB, "host memory"),
        *_two_ranks(
            "data.max_prompt_length=30",
            "generator.sampling_params.max_generate_length=300",
            "trainer.train_batch_size=8",
            "trainer.policy_mini_batch_size=8",
            "generator.n_samples_per_prompt=4",
        ),
    )
    assert cfg.trainer.micro_train_batch_size_per_gpu == 4
    assert (
        "2.0 GiB (8.0 GiB of host memory / 4 model processes)"
        in choices["trainer.micro_train_batch_size_per_gpu"].reason
    )


def test_keys_given_by_hand_are_kept_and_not_listed():
    given = (
        "trainer.policy.fsdp.reshard_after_forward=true",
        "trainer.micro_train_batch_size_per_gpu=4",
        "generator.batched=false",
        "trainer.policy.fsdp.mixed_precision.param_dtype=bfloat16",
    )
    cfg, choices = _resolve(TINY, CPU_HOST, *_two_ranks(*QUICKSTART_SHAPE, *given))
    assert cfg.trainer.policy.fsdp.reshard_after_forward is True and cfg.trainer.micro_train_batch_size_per_gpu == 4
    assert cfg.generator.batched is False
    assert not {
        "trainer.policy.fsdp.reshard_after_forward",
        "trainer.micro_train_batch_size_per_gpu",
        "generator.batched",
    } & set(choices)
    # the engines follow the policy's compute dtype even when it is given by hand
    assert cfg.generator.inference_engine.model_dtype == "bfloat16"


@pytest.mark.parametrize(
    "overrides",
    [("generator.max_turns=3",), ("generator.workflow=my_workflow",), ("generator.step_wise_trajectories=true",)],
)
def test_batched_generation_only_for_single_turn_env_rollouts(overrides):
    cfg, choices = _resolve(TINY, CPU_HOST, *overrides)
    assert cfg.generator.batched is False
    assert "one agent loop per trajectory" in choices["generator.batched"].reason


def test_model_facts_come_from_the_files_without_loading(tmp_path):
    model = build_tiny_model(TinyModelSpec(size=2), seed=0)
    model.save_pretrained(tmp_path)
    read_model_facts.cache_clear()
    facts, why_not = read_model_facts(str(tmp_path))
    assert why_not == "" and facts.source == "safetensors headers"
    assert facts.num_parameters == sum(p.numel() for p in model.parameters())
    assert (facts.num_layers, facts.hidden_size, facts.vocab_size) == (2, 128, 128)
    (tmp_path / "model.safetensors").unlink()  # no weights: estimated from config.json, within a few per cent
    read_model_facts.cache_clear()
    estimated, _ = read_model_facts(str(tmp_path))
    assert estimated.source == "estimated from config.json"
    assert estimated.num_parameters == pytest.approx(facts.num_parameters, rel=0.05)
    missing, why_not = read_model_facts(str(tmp_path / "absent"))
    assert missing is None and "no config.json" in why_not


def test_dry_run_prints_each_choice_with_its_reason(tmp_path):
    build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained(tmp_path / "model")
    cfg = SkyRLConfig.from_cli_overrides(
        [f"trainer.policy.model.path={tmp_path / 'model'}", "trainer.device=cpu", *_two_ranks(*QUICKSTART_SHAPE)]
    )
    text = render_resolved_config(cfg)
    (tmp_path / "printed.yaml").write_text(text)
    assert auto_keys(SkyRLConfig.from_yaml_file(tmp_path / "printed.yaml")) == []
    assert "# auto settings (chosen from the model size, world size and device):" in text
    assert "#   trainer.policy.fsdp.shard_layers=false: CPU (gloo collectives" in text
    assert "#   generator.batched=true: single-turn rollouts" in text
    assert "trainer.critic.gradient_checkpointing" not in text  # no critic in this run: resolved, not listed
    assert describe_choices([]).startswith("auto settings: none")


def test_a_run_resolves_once_and_its_workers_get_the_values(tmp_path):
    from skyrl_train.entrypoints.main_base import BasePPOExp

    build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained(tmp_path)
    cfg = SkyRLConfig.from_cli_overrides([f"trainer.policy.model.path={tmp_path}", "trainer.device=cpu"])
    experiment = BasePPOExp(cfg)
    assert auto_keys(cfg)  # the caller's config is left as given
    assert auto_keys(experiment.cfg) == [] and experiment.auto_choices
    assert experiment.cfg.trainer.policy.fsdp.mixed_precision.param_dtype == "float32"
