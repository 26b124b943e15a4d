"""GRPO in one file: the algorithm's core on the embedded tiny model, in plain torch, in one process (no Ray).

Read it top to bottom; each numbered section is one phase of a training step:

1. data       2-digit addition problems from skyrl-gym's generator (held-out problems the model never trained on)
2. sample     `--group` answers per prompt at temperature 1 from the project's `hf` engine, in this process
3. reward     each answer scored by the `addition` env: 1.0 for the exact sum, else 0.0
4. advantage  GRPO: (reward - group mean) / (group std + eps), on every token of the answer
5. loss       the registry's clipped PPO policy loss ("regular"), averaged over answer tokens
6. step       AdamW with the gradient clipped at norm 1

The functions of steps 4 and 5 are the ones the real trainer (`skyrl_train/trainer.py`) calls. What this file leaves
out: Ray actors, FSDP sharding, engines in their own processes and the weight sync to them (here the engine holds the
very model being trained), multi-turn rollouts, KL, a critic, checkpoints. Each batch takes exactly one optimizer
step on the samples it just drew, so the "old" policy of the PPO ratio is the current one: the ratio is 1 and the
clipping never triggers; the gradient is the policy gradient -A * grad log p.

    python examples/minimal_grpo.py             # the defaults (see docs/performance.md for a measured run)
    python examples/minimal_grpo.py --steps 3   # a smoke run

The last line is `minimal_grpo: eval accuracy before=<float> after=<float>`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import skyrl_gym
from skyrl_gym.envs.synthetic.generate import generate_splits
from skyrl_train.algorithms import PolicyLossConfig, compute_advantages, compute_policy_loss, masked_mean
from skyrl_train.algorithms.rewards import scalar_rewards_to_token_level
from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.types import SamplingParams
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.recipes.embedded import get_embedded_model, load_embedded_model
from skyrl_train.recipes.warm_start import WarmStartSettings

MODEL = WarmStartSettings(task="addition", difficulty=2, size=2, seed=0, train_examples=8192)
"""The quickstart's embedded model: 0.41 M parameters, warm-started on addition to ~25 % greedy accuracy (cached)."""
MAX_NEW_TOKENS = 8  # a 2-digit sum is at most 3 characters plus the end-of-turn token
LOG_EVERY = 10


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line: run length, batch shape, learning rate, evaluation, seed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps (one batch each)")
    parser.add_argument("--prompts", type=int, default=32, help="prompts per step")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt (the GRPO group)")
    parser.add_argument("--lr", type=float, default=2e-4, help="AdamW learning rate (constant)")
    parser.add_argument("--eval-size", type=int, default=200, help="held-out problems, at most 256")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between evaluations (0: first and last)")
    parser.add_argument("--seed", type=int, default=0, help="seeds prompt order and sampling")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one is robust on a busy machine)")
    parser.add_argument("--results", type=Path, help="also write the measurements here as JSON (docs/performance.md)")
    args = parser.parse_args(argv)
    if not 1 <= args.eval_size <= MODEL.eval_examples:
        parser.error(f"--eval-size must be in [1, {MODEL.eval_examples}] (the warm start's held-out problems)")
    if min(args.steps, args.prompts, args.group, args.threads) < 1 or args.eval_every < 0:
        parser.error("--steps, --prompts, --group and --threads must be >= 1 and --eval-every >= 0")
    return args


@dataclass
class RunResult:
    """What a run measured: accuracies, per-step loss and reward, how far the weights moved, wall time."""

    accuracy_before: float
    accuracy_after: float
    evaluations: list[tuple[int, float]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    relative_weight_change: float = 0.0
    """||theta_end - theta_start|| / ||theta_start|| over all parameters."""
    max_abs_weight_change: float = 0.0
    seconds: float = 0.0


# ----- 1. data --------------------------------------------------------------------------------------------------
def load_problems(eval_size: int) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows). Same task, difficulty and seed as the warm start, so the held-out rows are among
    the problems the warm start kept out of its training."""
    splits = generate_splits(
        MODEL.task, train_size=8000, test_size=eval_size, difficulty=MODEL.difficulty, seed=MODEL.seed
    )
    return splits["train"], splits["test"]


def prompt_ids(tokenizer, row: dict) -> list[int]:
    """The chat-templated prompt, ending with the assistant header the model answers after."""
    text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)


# ----- 2. sample, 3. reward ----------------------------------------------------------------------------------------
def score(row: dict, answer: str) -> float:
    """The reward of one answer, from the row's env (`addition`) made through skyrl-gym's registry."""
    env = skyrl_gym.make(row["env_class"], extras=row)
    try:
        env.init(row["prompt"])
        return float(env.step(answer)["reward"])
    finally:
        env.close()


def evaluate(engine: HFInferenceEngine, tokenizer, rows: list[dict]) -> float:
    """Held-out accuracy: the fraction of problems whose greedy answer gets reward 1."""
    greedy = SamplingParams(max_tokens=MAX_NEW_TOKENS, temperature=0.0, logprobs=False)
    outputs = engine.generate_batch([prompt_ids(tokenizer, row) for row in rows], greedy)
    return sum(score(row, text) for row, (text, *_) in zip(rows, outputs)) / len(rows)


def pack(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """One [B, P + R] batch: prompts left-padded to width P, responses right-padded to width R; `response_mask` [B, R]
    is 1 on the tokens the model generated."""
    width, length = max(map(len, prompts)), max(map(len, responses))
    input_ids = torch.full((len(prompts), width + length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        input_ids[i, width - len(prompt) : width + len(response)] = torch.tensor(prompt + response)
        attention_mask[i, width - len(prompt) : width + len(response)] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "prompt_width": width,
        "response_mask": attention_mask[:, width:].float(),
    }


def main(argv: list[str] | None = None) -> RunResult:
    """Train, printing progress; returns what was measured."""
    args = parse_args(argv)
    started = time.perf_counter()
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    train_rows, eval_rows = load_problems(args.eval_size)
    model, tokenizer = load_embedded_model(get_embedded_model(MODEL))
    engine = HFInferenceEngine(model, tokenizer, max_batch_size=max(args.prompts * args.group, args.eval_size))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    loss_config = PolicyLossConfig(loss_reduction="token_mean")
    initial = [p.detach().clone() for p in model.parameters()]
    print(f"minimal_grpo: {sum(p.numel() for p in initial) / 1e6:.2f} M parameters, {len(train_rows)} train prompts")

    before = evaluate(engine, tokenizer, eval_rows)
    result = RunResult(accuracy_before=before, accuracy_after=before, evaluations=[(0, before)])
    print(f"eval step 0: held-out accuracy {before:.3f} on {len(eval_rows)} problems", flush=True)

    for step in range(1, args.steps + 1):
        # ----- 1. data: this step's prompts -----
        rows = rng.sample(train_rows, args.prompts)
        prompts = [prompt_ids(tokenizer, row) for row in rows]

        # ----- 2. sample: `group` answers per prompt at temperature 1 (engine output is prompt-major) -----
        params = SamplingParams(max_tokens=MAX_NEW_TOKENS, temperature=1.0, n=args.group, logprobs=False)
        seeds = [rng.randrange(2**31) for _ in rows]  # one per prompt; sample j of it uses seed + j
        outputs = engine.generate_batch(prompts, params, seeds=seeds)
        texts, responses = [out[0] for out in outputs], [out[1] for out in outputs]
        group_of = [i // args.group for i in range(len(outputs))]

        # ----- 3. reward: the env scores every answer -----
        rewards = torch.tensor([score(rows[g], text) for g, text in zip(group_of, texts)])

        # ----- 4. advantage: GRPO over each prompt's group; the reward sits on the answer's last token -----
        batch = pack([prompts[g] for g in group_of], responses, tokenizer.pad_token_id)
        mask = batch["response_mask"]
        advantages, _ = compute_advantages(
            "grpo",
            token_level_rewards=scalar_rewards_to_token_level(rewards, mask),
            response_mask=mask,
            index=torch.tensor(group_of),
        )

        # ----- 5. loss: log-probs of the sampled tokens under the current policy, then the PPO policy loss -----
        model.train()
        log_probs, _ = response_logprobs(
            model, batch["input_ids"], batch["attention_mask"], batch["position_ids"], batch["prompt_width"]
        )
        loss, metrics = compute_policy_loss(
            "regular",
            log_probs=log_probs,
            old_log_probs=log_probs.detach(),  # one on-policy step per batch: old policy == current policy
            advantages=advantages,
            loss_mask=mask,
            config=loss_config,
        )

        # ----- 6. step -----
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        model.eval()

        result.losses.append(loss.item())
        result.rewards.append(rewards.mean().item())
        if step % LOG_EVERY == 0 or step == args.steps:
            grouped = rewards.view(args.prompts, args.group)
            with_signal = (grouped.std(dim=1) > 0).float().mean().item()  # groups with a nonzero advantage
            print(
                f"step {step}/{args.steps}: reward {rewards.mean():.3f}  loss {loss.item():+.4f}  "
                f"grad_norm {grad_norm:.3f}  groups with signal {with_signal:.0%}  "
                f"answer log-prob {masked_mean(log_probs.detach(), mask):.3f}  "
                f"ratio {metrics['ratio_mean']:.3f}  {(time.perf_counter() - started) / step:.2f} s/step",
                flush=True,
            )
        if step == args.steps or (args.eval_every and step % args.eval_every == 0):
            accuracy = evaluate(engine, tokenizer, eval_rows)
            result.evaluations.append((step, accuracy))
            print(f"eval step {step}: held-out accuracy {accuracy:.3f}", flush=True)

    result.accuracy_after = result.evaluations[-1][1]
    moved = [(p.detach() - p0) for p, p0 in zip(model.parameters(), initial)]
    norm = math.sqrt(sum(float(p0.pow(2).sum()) for p0 in initial))
    result.relative_weight_change = math.sqrt(sum(float(d.pow(2).sum()) for d in moved)) / norm
    result.max_abs_weight_change = max(float(d.abs().max()) for d in moved)
    result.seconds = time.perf_counter() - started
    print(f"weights moved {result.relative_weight_change:.4f} of their norm; {result.seconds:.0f} s in all")
    print(f"minimal_grpo: eval accuracy before={result.accuracy_before:.4f} after={result.accuracy_after:.4f}")
    if args.results:
        measured = {"settings": {key: value for key, value in vars(args).items() if key != "results"}, **asdict(result)}
        machine = f"{os.cpu_count()} CPUs, {platform.machine()}, torch {torch.__version__}"
        run = {"benchmark": "examples/minimal_grpo.py", "date": datetime.date.today().isoformat(), "machine": machine}
        args.results.write_text(json.dumps({**run, **measured}, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
