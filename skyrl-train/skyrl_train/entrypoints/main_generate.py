"""Generation-only runs: roll out the evaluation prompts with the policy's model and report them, without training.

    python -m skyrl_train.entrypoints.main_generate trainer.policy.model.path=... data.val_data="['test.parquet']" ...

SkyRL's `main_generate` (both module paths run this one). The run starts the inference engines serving
`trainer.policy.model.path` (no policy, reference or critic workers; a reward-model group only when
`reward.model.path` is set), rolls out every `data.val_data` prompt `generator.eval_n_samples_per_prompt` times with
`generator.eval_sampling_params` in batches of `trainer.eval_batch_size` prompts, scores them as training would
(`reward.*`), logs the `eval/*` metrics at step 0 to `trainer.logger` and writes the rollouts to
`<trainer.export_path>/dumped_evals/eval_only.jsonl`. `data.train_data` is not read, nothing is checkpointed or
exported, and the start-up warnings about training keys are left out. `--dry-run` prints the resolved config, as
`main_base` does.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from skyrl_train.config.registered_names import check_registered_names
from skyrl_train.config.root import SkyRLConfig
from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.evaluation import evaluate
from skyrl_train.generators.from_config import sampling_params_from_config
from skyrl_train.inference.ray_engine import EngineSettings, check_engine_backend
from skyrl_train.utils.checkpoint_io import local_directory_for_writing

logger = logging.getLogger(__name__)

DUMP_NAME = "eval_only.jsonl"
"""File (under `<export_path>/dumped_evals/`) of a generation-only run's rollouts."""


class GenerateExp(BasePPOExp):
    """A generation-only run built from the same `get_*` hooks as a training run (override them the same way)."""

    def __init__(self, cfg: SkyRLConfig) -> None:
        super().__init__(cfg)
        export = os.path.expanduser(cfg.trainer.export_path)
        self.dump_path = os.path.join(export, "dumped_evals", DUMP_NAME)
        """Where the rollouts go (a local path or an fsspec URL)."""

    def roles(self) -> list[str]:
        """Only the reward model, when one is configured: nothing trains and no reference is needed."""
        return ["reward"] if self.cfg.needs_reward_model else []

    def prepare(self) -> None:
        """Check the config's registry names and engine backend, load the tokenizer and the eval prompts, and check
        the env classes their rows name; all before Ray starts."""
        check_registered_names(self.cfg)
        check_engine_backend(EngineSettings.from_config(self.cfg, self.cfg.trainer.policy.model.path or ""))
        self.tokenizer = self.get_tokenizer()
        self.eval_items = self.get_eval_items(self.tokenizer)
        if not self.eval_items:
            raise ValueError("a generation-only run needs prompts: set data.val_data to one or more dataset files")
        uses: dict[str, str] = {}
        for item in self.eval_items:
            uses.setdefault(item["env_class"], f"eval data, uid {item['uid']}")
        check_registered_names(self.cfg, uses)

    async def generate(self) -> dict[str, float]:
        """Start the engines (and the reward model), roll out the eval prompts, log and dump them."""
        self.placement = self.get_placement()
        if self.roles():
            self.get_worker_groups(self.placement, total_steps=0)
        client = self.get_inference_client(self.get_inference_engines(self.placement))
        generator = self.get_generator(client, self.tokenizer)
        tracker = self.get_tracker(1)
        scorer = self.get_reward_scorer(self.tokenizer)
        trainer, generator_cfg = self.cfg.trainer, self.cfg.generator
        try:
            # an fsspec URL is written locally, then uploaded
            with local_directory_for_writing(os.path.dirname(self.dump_path)) as local:
                metrics = await evaluate(
                    generator,
                    self.eval_items,
                    sampling_params_from_config(generator_cfg.eval_sampling_params),
                    n_samples=generator_cfg.eval_n_samples_per_prompt,
                    dump_path=Path(local) / DUMP_NAME,
                    tokenizer=self.tokenizer,
                    batch_size=trainer.eval_batch_size,
                    score=None if scorer is None else scorer.score,
                )
            tracker.log(metrics, step=0)
        finally:
            tracker.finish()
            if hasattr(generator, "close"):
                generator.close()
        return metrics

    def run(self) -> dict[str, float]:  # type: ignore[override]
        """Check names and load the prompts (`prepare`), start (or join) Ray, generate, and release the actors."""
        return self._launch(self.generate)


def run_generation(cfg: SkyRLConfig) -> dict[str, float]:
    """Run `GenerateExp` and log its metrics and where the rollouts went."""
    experiment = GenerateExp(cfg)
    metrics = experiment.run()
    logger.info("generation-only run: %s; rollouts in %s", metrics, experiment.dump_path)
    return metrics


def main(
    argv: Optional[list[str]] = None, upstream_module: bool = False, extra_overrides: tuple[str, ...] = ()
) -> None:
    """Command-line entry: Hydra-style overrides; `--dry-run` prints the resolved config and exits (`main_base.main`
    for the arguments)."""
    from skyrl_train.config.cli import run_cli

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_cli(run_generation, argv, upstream_module=upstream_module, extra_overrides=extra_overrides, trains=False)


if __name__ == "__main__":
    main()
