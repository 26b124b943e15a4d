"""Generation-only runs (`main_generate`, both SkyRL module paths): the eval prompts are rolled out with the policy's
model, scored, logged at step 0 and dumped, with no training workers; a run without prompts fails before Ray."""

import json

import pytest
import ray

from skyrl_gym.envs.synthetic.arithmetic import score_response
from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.config import SkyRLConfig
from skyrl_train.entrypoints.main_generate import DUMP_NAME, GenerateExp
from skyrl_train.entrypoints.upstream_modules import run_upstream_module
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.recipes.embedded import get_embedded_model
from skyrl_train.recipes.warm_start import WarmStartSettings

QUICKSTART_MODEL = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)
"""The quickstart's warm-started model (cached): greedy, it answers about a quarter of 2-digit sums right."""


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tokenizer")
    build_char_tokenizer().save_pretrained(str(path))
    return str(path)


def test_roles_are_the_reward_model_or_nothing(tokenizer_dir):
    plain = GenerateExp(SkyRLConfig.from_cli_overrides([f"trainer.policy.model.path={tokenizer_dir}"]))
    assert plain.roles() == []
    judged = SkyRLConfig.from_cli_overrides([f"trainer.policy.model.path={tokenizer_dir}", "reward.model.path=rm"])
    assert GenerateExp(judged).roles() == ["reward"]


def test_a_run_without_eval_prompts_fails_before_ray_starts(tokenizer_dir):
    cfg = SkyRLConfig.from_cli_overrides([f"trainer.policy.model.path={tokenizer_dir}", "data.val_data=[]"])
    started_before = ray.is_initialized()
    with pytest.raises(ValueError, match="a generation-only run needs prompts: set data.val_data"):
        GenerateExp(cfg).run()
    assert ray.is_initialized() == started_before


def test_dry_run_leaves_out_the_training_warnings(capsys):
    # SkyRL's hf_save_interval default (-1) means "no export" there and is warned about for a training run; a
    # generation run exports nothing, so the warning would only mislead.
    for module, warned in (
        ("skyrl.train.entrypoints.main_base", True),
        ("skyrl.train.entrypoints.main_generate", False),
    ):
        run_upstream_module(module, ["trainer.resume_mode=null", "--dry-run"])
        captured = capsys.readouterr()
        assert ("config warning: trainer.hf_save_interval=-1" in captured.err) is warned, module
        assert "# resolved SkyRL config" in captured.out


@pytest.mark.integration
@pytest.mark.slow
def test_skyrl_generation_script_rolls_out_scores_logs_and_dumps(ray_cluster, tmp_path, capsys):
    """SkyRL's run_generation_gsm8k.sh overrides (upstream spelling, module path included), on the embedded model and
    held-out addition problems, with 2 samples per prompt in batches of 8 prompts."""
    write_dataset(tmp_path / "data", "addition", train_size=1, test_size=24, difficulty=2, seed=5)
    model = str(get_embedded_model(QUICKSTART_MODEL, progress=False))
    out = tmp_path / "run"
    run_upstream_module(
        "skyrl.train.entrypoints.main_generate",
        [
            f"data.val_data=['{tmp_path / 'data' / 'test.parquet'}']",
            f"trainer.policy.model.path={model}",
            "trainer.logger=jsonl",
            "trainer.placement.colocate_all=false",
            "generator.inference_engine.backend=hf",
            "generator.inference_engine.num_engines=1",
            "generator.inference_engine.tensor_parallel_size=1",
            "generator.inference_engine.model_dtype=float32",
            "generator.inference_engine.num_threads=1",
            "generator.eval_sampling_params.max_generate_length=8",
            "generator.eval_sampling_params.temperature=0.0",
            "generator.eval_n_samples_per_prompt=2",
            "environment.env_class=addition",
            "trainer.eval_batch_size=8",
            "trainer.device=cpu",
            "trainer.placement.num_cpus_per_worker=1",
            "trainer.run_name=gen",
            f"trainer.export_path={out / 'exports'}",
            f"trainer.ckpt_path={out / 'ckpts'}",
            f"trainer.log_path={out / 'logs'}",
        ],
    )
    assert "hf_save_interval" not in capsys.readouterr().err

    truths = {f"0:{i}": row for i, row in enumerate(_rows(tmp_path / "data" / "test.parquet"))}
    records = [json.loads(line) for line in (out / "exports" / "dumped_evals" / DUMP_NAME).read_text().splitlines()]
    assert sorted(r["uid"] for r in records) == sorted(uid for uid in truths for _ in range(2))
    for record in records:  # each score is the addition env's verdict on the dumped response
        truth = int(truths[record["uid"]]["reward_spec"]["ground_truth"])
        assert record["score"] == score_response(record["response"], truth).reward, record
        assert record["prompt"] == truths[record["uid"]]["prompt"]
    solved = {r["uid"] for r in records if r["score"] == 1.0}
    assert 0 < len(solved) < len(truths)  # the warm-started model: some sums right, not all

    (logged,) = [json.loads(line) for line in (out / "logs" / "jsonl" / "skyrl" / "gen.jsonl").read_text().splitlines()]
    assert logged["step"] == 0
    assert logged["eval/all/pass_at_2"] == pytest.approx(len(solved) / len(truths))
    assert logged["eval/all/mean_reward"] == pytest.approx(sum(r["score"] for r in records) / len(records))
    assert sorted(p.name for p in out.iterdir()) == ["exports", "logs"]  # no checkpoints, no exported model
    assert [p.name for p in (out / "exports").iterdir()] == ["dumped_evals"]


def _rows(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()
