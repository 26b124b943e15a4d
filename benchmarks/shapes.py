"""The two shapes of the comparison with TRL (`vs_trl.py --shape`) and of the step breakdown (`step_breakdown.py
--shape long`): the warm-started model both sides start from, the task, the batch shape and the algorithm settings.

- `short`: the quickstart's task, 2-digit addition with 8-token answers, on its embedded 0.4 M-parameter model;
- `long`: `Convert <3-6 digits> to binary` with the halving shown (skyrl-gym's `binary` family: answers of 95-316
  characters, 210 on average, one token each with the char tokenizer) on a 21 M-parameter model (7 layers of width
  448, MLP ratio 4) warm-started on the task by `skyrl_train.recipes.warm_start`.

`ours_overrides` is our side's whole config: only the model, the data, the batch shape, the algorithm settings
shared with TRL, the placement and the run's bookkeeping (no checkpoints, no evaluation during training, exports
and logs in the scratch folder). Every speed setting keeps its default (`auto`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skyrl_train.recipes.warm_start import WarmStartSettings


@dataclass(frozen=True)
class Shape:
    """One comparison shape: model, task, batch shape and algorithm settings (the same on both sides)."""

    name: str
    model: WarmStartSettings
    """The warm start both sides begin from; its task and difficulty are the RL task's."""
    prompts_per_step: int
    samples_per_prompt: int
    max_new_tokens: int
    max_prompt_length: int
    """Prompt tokens of the longest chat-templated question (our `data.max_prompt_length`)."""
    learning_rate: float
    train_problems: int
    eval_problems: int
    """Held-out problems scored greedily before and after (at most the warm start's held-out split)."""
    steps: int
    """Training steps of a full measurement."""

    @property
    def completions_per_step(self) -> int:
        """Samples generated and trained on per step."""
        return self.prompts_per_step * self.samples_per_prompt


SHORT = Shape(
    name="short",
    model=WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192),
    prompts_per_step=32,
    samples_per_prompt=8,
    max_new_tokens=8,
    max_prompt_length=64,
    learning_rate=2e-4,
    train_problems=8000,
    eval_problems=200,
    steps=300,
)

LONG = Shape(
    name="long",
    model=WarmStartSettings(
        task="binary",
        difficulty=6,
        size=7,
        mlp_ratio=4,
        seed=0,
        train_examples=32768,
        eval_examples=128,
        max_steps=1500,
        batch_size=16,
        lr=1e-3,
        warmup_steps=50,
        eval_every=50,
        target_low=0.2,
        target_high=0.5,
        max_new_tokens=330,
        sample_n=4,
        sample_prompts=32,
    ),
    prompts_per_step=4,
    samples_per_prompt=4,
    max_new_tokens=330,
    max_prompt_length=48,
    learning_rate=5e-5,
    train_problems=8000,
    eval_problems=128,
    steps=300,
)

SHAPES = {shape.name: shape for shape in (SHORT, LONG)}


def ours_overrides(shape: Shape, model_dir: Path, data_dir: Path, work: Path, steps: int, seed: int) -> list[str]:
    """Our config for `shape`: the comparison's settings, 2 FSDP2 ranks + 2 colocated `hf` engines (the
    quickstart's placement), and nothing else: every speed setting is left at its default."""
    return [
        f"trainer.policy.model.path={model_dir}",
        f"data.train_data=['{data_dir / 'train.parquet'}']",
        "data.val_data=[]",  # held-out accuracy is scored after the run, the same way for both sides
        f"data.max_prompt_length={shape.max_prompt_length}",
        f"data.seed={seed}",
        f"environment.env_class={shape.model.task}",
        # placement: two policy ranks, each sharing its CPU with one engine
        "trainer.placement.policy_num_gpus_per_node=2",
        "generator.inference_engine.num_engines=2",
        # batch shape
        f"trainer.train_batch_size={shape.prompts_per_step}",
        f"trainer.policy_mini_batch_size={shape.prompts_per_step}",  # one optimizer step per batch, as TRL
        f"generator.n_samples_per_prompt={shape.samples_per_prompt}",
        f"generator.sampling_params.max_generate_length={shape.max_new_tokens}",
        f"generator.eval_sampling_params.max_generate_length={shape.max_new_tokens}",
        # algorithm settings shared with TRL's side
        "trainer.algorithm.advantage_estimator=grpo",
        "trainer.algorithm.use_kl_loss=false",
        f"trainer.policy.optimizer.lr={shape.learning_rate}",
        "trainer.policy.optimizer.scheduler=constant",
        "trainer.policy.optimizer.num_warmup_steps=0",
        "trainer.policy.optimizer.weight_decay=0.0",
        "generator.sampling_params.temperature=1.0",
        f"generator.sampling_params.seed={seed}",
        f"trainer.seed={seed}",
        f"trainer.max_training_steps={steps}",
        "trainer.epochs=100",
        # bookkeeping: nothing saved or evaluated during the run (TRL's side saves and evaluates nothing either)
        "trainer.eval_before_train=false",
        "trainer.eval_interval=0",
        "trainer.ckpt_interval=0",
        "trainer.hf_save_interval=-1",
        "trainer.resume_mode=none",
        f"trainer.ckpt_path={work / 'ckpts'}",
        f"trainer.export_path={work / 'exports'}",
        f"trainer.log_path={work / 'logs'}",
        "trainer.logger=['console']",
    ]
