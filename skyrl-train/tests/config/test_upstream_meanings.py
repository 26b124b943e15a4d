"""Keys NovaSky-AI/SkyRL spells like this project but reads differently: upstream's meaning is taken, or a run that
speaks SkyRL's dialect is warned at start-up with both meanings (one test per case of the migration study)."""

import warnings

import pytest

from skyrl_train.config import ConfigWarning, SkyRLConfig

SKYRL = "trainer.strategy=fsdp"  # any upstream key or value marks a run as speaking SkyRL's dialect
QUIET = ["trainer.hf_save_interval=5"]  # keeps the (default) export-interval warning out of the other cases


def warnings_of(*overrides: str) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        SkyRLConfig.from_cli_overrides(list(overrides))
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def only(messages: list[str], words: str) -> list[str]:
    return [message for message in messages if words in message]


def test_ckpt_interval_minus_one_warns_that_a_final_checkpoint_is_still_saved():
    [message] = only(warnings_of(SKYRL, *QUIET, "trainer.ckpt_interval=-1"), "trainer.ckpt_interval=-1")
    assert "still saved at the end" in message and "in SkyRL a value <= 0 saves none" in message
    assert not only(warnings_of(*QUIET, "trainer.ckpt_interval=-1"), "ckpt_interval")  # this project's own dialect


def test_hf_save_interval_minus_one_warns_that_the_final_model_is_still_exported():
    [message] = only(warnings_of(SKYRL), "trainer.hf_save_interval=-1")
    assert "final model is still exported" in message and "in SkyRL a value <= 0 exports none" in message
    assert not only(warnings_of(SKYRL, *QUIET), "hf_save_interval")
    assert not only(warnings_of(), "hf_save_interval")


def test_eval_interval_off_warns_that_the_first_and_final_evaluations_still_run():
    [message] = only(warnings_of(SKYRL, *QUIET, "trainer.eval_interval=-1"), "trainer.eval_interval=-1")
    assert "before training" in message and "In SkyRL a value <= 0 turns every evaluation off" in message
    quiet = warnings_of(
        SKYRL, *QUIET, "trainer.eval_interval=-1", "trainer.eval_before_train=false", "data.val_data=[]"
    )
    assert not only(quiet, "eval_interval")


def test_dapo_buffer_length_switches_the_penalty_on_and_our_own_length_alone_warns():
    cfg = SkyRLConfig.from_cli_overrides(["+trainer.algorithm.overlong_buffer.len=256", *QUIET])
    assert cfg.trainer.algorithm.overlong_buffer.enabled and cfg.trainer.algorithm.overlong_buffer.length == 256
    [message] = only(warnings_of("trainer.algorithm.overlong_buffer.length=256"), "overlong_buffer")
    assert "enabled=false: no overlong penalty is applied" in message and "SkyRL's DAPO entrypoint" in message


def test_kl_in_reward_warns_which_coefficient_it_reads():
    kl = ["trainer.algorithm.use_kl_loss=false", "trainer.algorithm.use_kl_in_reward=true"]
    [message] = only(warnings_of(*kl, "trainer.algorithm.kl_loss_coef=0.05"), "use_kl_in_reward")
    assert "kl_ctrl.kl_coef=0.001 here" in message and "SkyRL uses trainer.algorithm.kl_loss_coef (0.05)" in message
    assert not only(warnings_of(*kl), "use_kl_in_reward")  # the two defaults agree


def test_tis_auto_in_an_async_mode_warns_that_token_tis_is_applied():
    async_run = [SKYRL, *QUIET, "trainer.mode=one_step_off", "trainer.placement.colocate_all=false"]
    [message] = only(warnings_of(*async_run), "tis_ratio_type is auto")
    assert "applies token-level TIS here" in message and "SkyRL's default (null) applies none" in message
    off = "trainer.algorithm.off_policy_correction.tis_ratio_type=null"
    assert not only(warnings_of(*async_run, off), "tis_ratio_type")


def test_legacy_token_mean_warns_that_it_averages_the_whole_mini_batch():
    legacy = ["generator.backend=hf", *QUIET]
    [message] = only(warnings_of(*legacy), "loss_reduction=token_mean")
    assert "every token of the mini-batch" in message and "legacy layout averaged each micro-batch" in message
    assert not only(warnings_of(SKYRL, *QUIET), "loss_reduction")  # the current layout's token_mean is ours


def test_evaluation_generates_as_long_as_training_in_a_skyrl_dialect_run():
    length = "generator.sampling_params.max_generate_length=2048"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upstream = SkyRLConfig.from_cli_overrides([SKYRL, length])
        ours = SkyRLConfig.from_cli_overrides([length])
        explicit = SkyRLConfig.from_cli_overrides(
            [SKYRL, length, "generator.eval_sampling_params.max_generate_length=64"]
        )
    assert upstream.generator.eval_sampling_params.max_generate_length == 2048
    assert ours.generator.eval_sampling_params.max_generate_length == 1024
    assert explicit.generator.eval_sampling_params.max_generate_length == 64


def test_legacy_dr_grpo_gets_upstreams_default_normaliser():
    drgrpo = ["trainer.algorithm.loss_reduction=seq_mean_token_sum_norm", "trainer.max_prompt_length=256"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = SkyRLConfig.from_cli_overrides(
            ["generator.backend=hf", *drgrpo, "generator.sampling_params.max_generate_length=512"]
        )
    assert cfg.trainer.algorithm.max_seq_len == 256 + 512
    with pytest.raises(Exception, match="max_seq_len"):  # the current layout, like this project, needs it set
        SkyRLConfig.from_cli_overrides([SKYRL, *drgrpo])
