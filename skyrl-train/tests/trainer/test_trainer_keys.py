"""A short real run that shows the evaluation, checkpoint, export and logging keys doing what they document."""

import json
import os

import pytest

from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.generators import SkyRLGymGenerator

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class RecordingGenerator(SkyRLGymGenerator):
    """The real generator, noting what each generate call asked for."""

    calls: list[tuple[str, int, int, float]]

    async def generate(self, generator_input):
        params = generator_input.sampling_params or self.settings.sampling_params
        phase = "train" if generator_input.sampling_params is None else "eval"
        self.calls.append((phase, len(generator_input.prompts), params.max_tokens, params.temperature))
        return await super().generate(generator_input)


class RecordingExp(BasePPOExp):
    def get_generator(self, client, tokenizer):
        generator = super().get_generator(client, tokenizer)
        recording = RecordingGenerator(generator.client, generator.tokenizer, generator.settings)
        generator.close()
        recording.calls = []
        self.recording = recording
        return recording


def test_eval_checkpoint_export_and_logging_keys(ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path):
    cfg = make_config(
        spread_tiny_model_dir,
        data_dir,
        tmp_path,
        "trainer.max_training_steps=2",
        "trainer.eval_before_train=true",
        "trainer.eval_interval=1",
        "trainer.eval_batch_size=3",
        "generator.eval_n_samples_per_prompt=2",
        "generator.eval_sampling_params.max_generate_length=3",
        "trainer.ckpt_interval=1",
        "trainer.max_ckpts_to_keep=1",
        "trainer.hf_save_interval=1",
        "trainer.logger=[console,jsonl]",
        "trainer.project_name=keys",
        "trainer.run_name=walk",
        "trainer.record_timeline=true",
    )
    experiment = RecordingExp(cfg)
    result = experiment.run()
    assert result.global_step == 2
    # eval before training (step 0), every step (1), and at the end (2); 8 eval prompts x 2 samples
    assert [step for step, _ in result.history["eval/all/pass_at_2"]] == [0, 1, 2]
    evals = [call for call in experiment.recording.calls if call[0] == "eval"]
    assert [count for _, count, _, _ in evals] == [6, 6, 4] * 3  # batches of 3 prompts x 2 samples: 3 + 3 + 2
    assert {(tokens, temperature) for _, _, tokens, temperature in evals} == {(3, 0.0)}
    trains = [call for call in experiment.recording.calls if call[0] == "train"]
    assert [count for _, count, _, _ in trains] == [16, 16]  # 4 prompts x generator.n_samples_per_prompt=4
    dumps = sorted(os.listdir(tmp_path / "exports" / "dumped_evals"))
    assert dumps == ["global_step_0.jsonl", "global_step_1.jsonl", "global_step_2.jsonl"]
    # checkpoints every step, only the newest kept; HF exports every step under export_path
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["global_step_2", "latest_checkpointed_step.txt"]
    assert experiment.trainer.checkpoints.exported_paths == [
        str(tmp_path / "exports" / "global_step_1" / "policy"),
        str(tmp_path / "exports" / "global_step_2" / "policy"),
    ]
    # the jsonl backend writes under log_path/jsonl/<project_name>/<run_name>.jsonl
    lines = (tmp_path / "logs" / "jsonl" / "keys" / "walk.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 2]  # step 2: its metrics, then the final eval
    # record_timeline: each step's driver phases, the policy rank's compute and the engines' decoding, in wall time
    spans = [json.loads(line) for line in (tmp_path / "logs" / "timeline.jsonl").read_text().splitlines()]
    lanes = {(span["lane"], span["name"]) for span in spans}
    assert {("trainer", "train_policy"), ("policy rank 0", "forward_backward")} <= lanes
    assert any(lane.startswith("engine ") and name == "generate" for lane, name in lanes)
    assert {span["step"] for span in spans} == {1, 2} and all(span["start"] <= span["end"] for span in spans)
