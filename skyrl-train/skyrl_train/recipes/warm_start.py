"""Supervised warm start of the tiny model on a synthetic task, stopping once held-out greedy accuracy is in a band.

The recipe, in four points:
1. Problems come from skyrl-gym's generator (`generate_splits` with the settings' seed): the test split is the
   held-out set, the train split the supervised data (disjoint from it).
2. Each example is the chat-templated prompt followed by the reference answer and `<|im_end|>`; the loss is the
   mean next-token cross-entropy over those answer tokens only. With `turns > 1` an example is a multi-turn episode:
   after each answer a user message (`follow_up`) asks the next question, rendered exactly as the multi-turn
   generator renders env observations, and every answer is labelled.
3. AdamW with a linear warmup then a constant rate; data order and initial weights come from the seed, so the same
   settings (and thread count) give the same weights.
4. Every `eval_every` steps the held-out set is answered greedily by the `hf` engine and scored by the real env;
   training stops at the first evaluation whose accuracy reaches `target_low`, so the model keeps room for RL.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Optional

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

import skyrl_gym
from skyrl_gym.envs.synthetic import get_task
from skyrl_gym.envs.synthetic.base import check_difficulty
from skyrl_gym.envs.synthetic.generate import generate_splits
from skyrl_train.generators.chat import ObservationRenderer
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.types import SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer

Row = dict[str, Any]
Example = tuple[list[int], list[int]]
"""A supervised example: token ids and, per token, 1 where it is a labelled answer token."""
_DEFAULT_FOLLOW_UP = "{question}"


@dataclass(frozen=True)
class WarmStartSettings:
    """Everything that decides the warm-started model. `size` is the model dial; the rest has working defaults."""

    task: str = "arithmetic"
    """Synthetic task family (`arithmetic`, `countdown`, `reverse`); also the env that scores answers."""
    difficulty: int = 2
    """Task difficulty, 1 (easiest) to 10; arithmetic 2 is 2-digit `a+b` / `a-b`."""
    size: int = 2
    """The tiny model's dial: layers = size, width = 64 * size (size 2 is 0.41 M parameters, size 3 1.35 M)."""
    architecture: Literal["qwen2", "qwen3"] = "qwen2"
    """Model architecture of the tiny model."""
    seed: int = 0
    """Seeds the initial weights, the data splits and the data order."""
    train_examples: int = 16384
    """Distinct supervised problems (the train split); steps beyond one pass reshuffle them. Many distinct problems
    matter: at lr 3e-3, 8192 of them left size 2 at 2% accuracy after 500 steps where 16000 gave 25%."""
    eval_examples: int = 256
    """Held-out problems (the test split) scored greedily for early stopping and the final accuracy."""
    max_steps: int = 1500
    """Most optimizer steps; training stops earlier once the target accuracy is reached (~550-750 steps here)."""
    batch_size: int = 64
    """Examples per optimizer step."""
    lr: float = 1e-3
    """AdamW peak learning rate (1e-3 reached 20% within 520-730 steps for seeds 0-3; one 2e-3 run stalled at 7%)."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    warmup_steps: int = 20
    """Steps of linear learning-rate warmup from 0."""
    eval_every: int = 10
    """Steps between held-out evaluations."""
    target_low: float = 0.2
    """Stop at the first evaluation whose greedy accuracy is at least this (<= 0 never stops early)."""
    target_high: float = 0.4
    """Upper end of the band the model should land in; reported (`in_target_band`), not enforced."""
    max_new_tokens: int = 16
    """Generation budget per answer when measuring accuracy."""
    turns: int = 1
    """Questions per supervised example. Above 1, each example is an episode of that many turns: the row's question
    and answer, then the questions of the next `turns - 1` train rows, each in a user message made by `follow_up` and
    each answered. A model for a multi-turn env needs this: a single-turn model has never seen a second question.
    Held-out accuracy (early stop and reports) stays the first turn's."""
    follow_up: str = _DEFAULT_FOLLOW_UP
    """The user message that asks a later question of a multi-turn example: `{question}` is the question,
    `{previous_answer}` the reference answer of the turn before. Match what the env shows after a turn."""
    sample_n: int = 8
    """Samples per prompt (temperature 1) in the final sampled measurement."""
    sample_prompts: int = 128
    """Held-out prompts in the final sampled measurement (the first ones of the test split)."""

    def __post_init__(self) -> None:
        get_task(self.task)  # raises with the list of known tasks
        positive = (
            "size",
            "train_examples",
            "eval_examples",
            "batch_size",
            "eval_every",
            "max_new_tokens",
            "sample_n",
            "turns",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"WarmStartSettings.{name} must be a positive integer, got {value!r}")
        for name in ("max_steps", "warmup_steps", "sample_prompts"):
            if getattr(self, name) < 0:
                raise ValueError(f"WarmStartSettings.{name} must be >= 0, got {getattr(self, name)!r}")
        if not self.lr > 0:
            raise ValueError(f"WarmStartSettings.lr must be > 0, got {self.lr!r}")
        if not 0 <= self.target_high <= 1 or self.target_low > self.target_high:
            raise ValueError(
                f"WarmStartSettings: need target_low <= target_high with target_high in [0, 1]; got "
                f"target_low={self.target_low}, target_high={self.target_high}"
            )
        try:
            filled = self.follow_up.format(question="\x00Q\x00", previous_answer="A")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"WarmStartSettings.follow_up may use only {{question}} and {{previous_answer}}; "
                f"{self.follow_up!r} fails: {exc!r}"
            ) from None
        if "\x00Q\x00" not in filled:
            raise ValueError(f"WarmStartSettings.follow_up must contain {{question}}; got {self.follow_up!r}")
        TinyModelSpec(size=self.size, architecture=self.architecture)  # validates the model fields
        available = get_task(self.task).count_problems(check_difficulty(self.difficulty))
        if available is not None and self.train_examples + self.eval_examples > available:
            raise ValueError(
                f"WarmStartSettings: {self.task} at difficulty {self.difficulty} has {available} distinct problems; "
                f"train_examples ({self.train_examples}) + eval_examples ({self.eval_examples}) must not exceed it"
            )

    @property
    def model_spec(self) -> TinyModelSpec:
        """The tiny model these settings build."""
        return TinyModelSpec(size=self.size, architecture=self.architecture)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (cache keys, the model's description file). The multi-turn fields are left
        out at their single-turn defaults, so single-turn models keep the cache keys they had before those fields."""
        settings = asdict(self)
        if self.turns == 1 and self.follow_up == _DEFAULT_FOLLOW_UP:
            del settings["turns"], settings["follow_up"]
        return settings


@dataclass
class SampledStats:
    """Temperature-1 sampling on held-out prompts, `n` samples each, scored by the env."""

    accuracy: float
    """Fraction of all samples that are correct."""
    well_formed: float
    """Fraction of samples the env could read as an answer (no parse error)."""
    prompts_with_a_correct_sample: float
    """Fraction of prompts with at least one correct sample (pass@n)."""
    prompts_with_mixed_rewards: float
    """Fraction of prompts with both correct and wrong samples: the prompts that give GRPO a signal."""


@dataclass
class WarmStartResult:
    """The trained model and what was measured on the way."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    steps: int
    """Optimizer steps taken."""
    greedy_accuracy: float
    """Held-out greedy accuracy of the returned model."""
    reached_target: bool
    """True when training stopped because `greedy_accuracy >= target_low`."""
    train_seconds: float
    history: list[dict[str, float]] = field(default_factory=list)
    """One record per evaluation: step, loss (mean since the previous evaluation), greedy accuracy."""

    @property
    def num_parameters(self) -> int:
        """Parameter count of the model (tied embeddings counted once)."""
        return sum(p.numel() for p in self.model.parameters())


# ----- data ----------------------------------------------------------------------------------------------------
def make_splits(settings: WarmStartSettings) -> dict[str, list[Row]]:
    """The dataset rows: `test` (held out, drawn first) and `train`, disjoint, both from the settings' seed.

    A dataset made by `generate_splits` with the same task, difficulty, seed and test size has this same test split.
    """
    return generate_splits(
        settings.task,
        train_size=settings.train_examples,
        test_size=settings.eval_examples,
        difficulty=settings.difficulty,
        seed=settings.seed,
        progress=False,
    )


def prompt_ids(tokenizer: PreTrainedTokenizerBase, row: Row) -> list[int]:
    """The chat-templated prompt of a row, ending with the assistant header."""
    encoded = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def encode_example(tokenizer: PreTrainedTokenizerBase, row: Row) -> tuple[list[int], int]:
    """(prompt + reference answer + eos token ids, number of prompt tokens)."""
    prompt = prompt_ids(tokenizer, row)
    answer = tokenizer.encode(row["extra_info"]["answer"], add_special_tokens=False)
    return prompt + answer + [tokenizer.eos_token_id], len(prompt)


def encode_episode(
    tokenizer: PreTrainedTokenizerBase, rows: list[Row], follow_up: str, renderer: Optional[ObservationRenderer] = None
) -> Example:
    """An example of `rows`: the first row's prompt and answer, then for each later row a user message (`follow_up`
    with its question and the previous row's answer) and its answer. The tokens between turns are the ones the
    multi-turn generator puts there (`ObservationRenderer`); every answer and its eos token are labelled."""
    ids, prompt_length = encode_example(tokenizer, rows[0])
    labelled = [0] * prompt_length + [1] * (len(ids) - prompt_length)
    if renderer is None and len(rows) > 1:
        renderer = ObservationRenderer(tokenizer)
    for previous, row in zip(rows, rows[1:]):
        content = follow_up.format(
            question=row["extra_info"]["question"], previous_answer=previous["extra_info"]["answer"]
        )
        between = renderer.continuation_ids([{"role": "user", "content": content}])
        answer = tokenizer.encode(row["extra_info"]["answer"], add_special_tokens=False) + [tokenizer.eos_token_id]
        ids = ids + between + answer
        labelled += [0] * len(between) + [1] * len(answer)
    return ids, labelled


def collate(examples: list[Example], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch; `labels` hold the labelled (answer) tokens and -100 everywhere else, padding included."""
    width = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for i, (ids, labelled) in enumerate(examples):
        row = torch.tensor(ids)
        input_ids[i, : len(ids)] = row
        attention_mask[i, : len(ids)] = 1
        labels[i, : len(ids)] = torch.where(torch.tensor(labelled, dtype=torch.bool), row, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def answer_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting each labelled token from the position before it (-100 labels ignored)."""
    predicted = logits[:, :-1, :].reshape(-1, logits.shape[-1]).float()
    return torch.nn.functional.cross_entropy(predicted, labels[:, 1:].reshape(-1), ignore_index=-100)


def train_step(model: PreTrainedModel, optimizer: torch.optim.Optimizer, batch: dict[str, torch.Tensor]) -> float:
    """One supervised step on a `collate`d batch: answer loss, backward, gradient norm clipped at 1, optimizer step.
    Returns the loss."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    loss = answer_loss(logits, batch["labels"])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def batch_order(num_examples: int, steps: int, batch_size: int, seed: int) -> list[list[int]]:
    """Example indices for each step: passes over the data, each in a fresh seeded shuffle."""
    rng = random.Random(f"skyrl-train/warm-start/{seed}")
    flat: list[int] = []
    while len(flat) < steps * batch_size:
        permutation = list(range(num_examples))
        rng.shuffle(permutation)
        flat.extend(permutation)
    return [flat[s * batch_size : (s + 1) * batch_size] for s in range(steps)]


# ----- measuring -----------------------------------------------------------------------------------------------
def score_response(row: Row, response: str) -> tuple[float, bool]:
    """(reward, well formed) of one response, from the row's env (`env_class`) built through skyrl-gym."""
    env = skyrl_gym.make(row["env_class"], env_config={}, extras=row)
    try:
        env.init(row["prompt"])
        output = env.step(response)
    finally:
        env.close()
    return float(output["reward"]), output["metadata"].get("parse_error") is None


def generate_responses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[Row],
    params: SamplingParams,
    max_batch_size: int = 256,
) -> list[str]:
    """`params.n` responses per row (row-major) from the `hf` engine, in batches of at most `max_batch_size`."""
    was_training = model.training
    engine = HFInferenceEngine(model, tokenizer, max_batch_size=max_batch_size)
    prompts = [prompt_ids(tokenizer, row) for row in rows]
    per_batch = max(1, max_batch_size // params.n)
    texts: list[str] = []
    try:
        for start in range(0, len(prompts), per_batch):
            texts.extend(text for text, *_ in engine.generate_batch(prompts[start : start + per_batch], params))
    finally:
        model.train(was_training)
    return texts


def greedy_accuracy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: list[Row], max_new_tokens: int = 16
) -> float:
    """Fraction of rows whose greedy response the env rewards with 1."""
    if not rows:
        return 0.0
    params = SamplingParams(max_tokens=max_new_tokens, temperature=0.0, logprobs=False)
    responses = generate_responses(model, tokenizer, rows, params)
    return sum(score_response(row, text)[0] >= 1.0 for row, text in zip(rows, responses)) / len(rows)


def sampled_stats(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: list[Row],
    n: int = 8,
    max_new_tokens: int = 16,
    seed: int = 0,
) -> SampledStats:
    """Sample `n` responses per row at temperature 1 (seeded) and summarise how GRPO would see them."""
    if not rows:
        return SampledStats(0.0, 0.0, 0.0, 0.0)
    params = SamplingParams(max_tokens=max_new_tokens, temperature=1.0, n=n, seed=seed, logprobs=False)
    responses = generate_responses(model, tokenizer, rows, params)
    scores = [score_response(rows[i // n], text) for i, text in enumerate(responses)]
    correct = [reward >= 1.0 for reward, _ in scores]
    per_prompt = [sum(correct[i * n : (i + 1) * n]) for i in range(len(rows))]
    return SampledStats(
        accuracy=sum(correct) / len(correct),
        well_formed=sum(ok for _, ok in scores) / len(scores),
        prompts_with_a_correct_sample=sum(k > 0 for k in per_prompt) / len(rows),
        prompts_with_mixed_rewards=sum(0 < k < n for k in per_prompt) / len(rows),
    )


# ----- the loop ------------------------------------------------------------------------------------------------
def encode_examples(tokenizer: PreTrainedTokenizerBase, rows: list[Row], settings: WarmStartSettings) -> list[Example]:
    """One example per train row: the episode of it and the next `turns - 1` rows (wrapping around), asked with
    `settings.follow_up` (with `turns == 1`, the row alone)."""
    renderer = ObservationRenderer(tokenizer) if settings.turns > 1 else None
    return [
        encode_episode(
            tokenizer, [rows[(i + k) % len(rows)] for k in range(settings.turns)], settings.follow_up, renderer
        )
        for i in range(len(rows))
    ]


def _encode_checked(tokenizer: PreTrainedTokenizerBase, rows: list[Row], settings: WarmStartSettings) -> list[Example]:
    """Encode the training rows, checking that the model's vocabulary and context hold them."""
    spec = settings.model_spec
    if len(tokenizer) > spec.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens; TinyModelSpec.vocab_size {spec.vocab_size} is less"
        )
    examples = encode_examples(tokenizer, rows, settings)
    longest = max(len(ids) for ids, _ in examples)
    if longest > spec.max_position_embeddings:
        raise ValueError(
            f"a training example has {longest} tokens; TinyModelSpec.max_position_embeddings is "
            f"{spec.max_position_embeddings}"
        )
    return examples


def warm_start(
    settings: WarmStartSettings, progress: bool = True, splits: Optional[dict[str, list[Row]]] = None
) -> WarmStartResult:
    """Build the tiny model from the seed and train it on the task until the held-out accuracy reaches the target.

    `splits` (from `make_splits(settings)`) may be passed to reuse generated data.
    """
    splits = splits if splits is not None else make_splits(settings)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(settings.model_spec, seed=settings.seed, pad_token_id=tokenizer.pad_token_id).train()
    examples = _encode_checked(tokenizer, splits["train"], settings)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings.lr, betas=(0.9, 0.98), weight_decay=settings.weight_decay
    )
    warmup = settings.warmup_steps
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1)
    held_out = splits["test"]
    history: list[dict[str, float]] = []
    accuracy, reached, steps, losses = 0.0, False, 0, []
    started = time.perf_counter()
    bar = tqdm(total=settings.max_steps, desc=f"warm start {settings.task}", unit="step", disable=not progress)
    try:
        for steps, indices in enumerate(
            batch_order(len(examples), settings.max_steps, settings.batch_size, settings.seed), 1
        ):
            losses.append(train_step(model, optimizer, collate([examples[i] for i in indices], tokenizer.pad_token_id)))
            schedule.step()
            bar.update(1)
            if steps % settings.eval_every == 0 or steps == settings.max_steps:
                accuracy = greedy_accuracy(model, tokenizer, held_out, settings.max_new_tokens)
                history.append({"step": steps, "loss": sum(losses) / len(losses), "greedy_accuracy": accuracy})
                bar.set_postfix(loss=f"{history[-1]['loss']:.3f}", acc=f"{accuracy:.2f}")
                losses = []
                if settings.target_low > 0 and accuracy >= settings.target_low:
                    reached = True
                    break
    finally:
        bar.close()
    if not history:  # max_steps == 0: measure the untrained model
        accuracy = greedy_accuracy(model, tokenizer, held_out, settings.max_new_tokens)
    model.eval()
    return WarmStartResult(model, tokenizer, steps, accuracy, reached, time.perf_counter() - started, history)
