"""Supervised fine-tuning written against the official `tinker` client only: cross_entropy on prompt + answer with
weight 1 on the answer tokens, then optim_step, on the embedded model's addition task.

    python examples/tinker/sl_loop.py                       # starts a local skyrl-tx serve for the run
    python examples/tinker/sl_loop.py --base-url http://127.0.0.1:8000 --steps 200

Tinker losses are sums over tokens, so the weights are divided by the batch's answer-token count (a per-token mean).
Checkpoints: `save_state` at the end (resume with `create_training_client_from_state_with_optimizer`), and sampler
weights for the held-out evaluation. The last line is `sl_loop: held-out accuracy before=<float> after=<float>`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional

from tinker import types

sys.path.insert(0, str(Path(__file__).resolve().parent))
import arithmetic  # noqa: E402  (the shared task helpers next to this file)


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    """Run length, batch size, learning rate, evaluation."""
    parser = arithmetic.loop_parser(__doc__, steps=100)
    parser.add_argument("--batch", type=int, default=64, help="examples per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    return arithmetic.parse_checked(parser, argv, positive=["steps", "batch", "rank"])


def example(tokenizer, row: dict) -> tuple[list[int], list[int]]:
    """(prompt + answer + end-of-turn tokens, per-position 1/0 marks of the answer tokens among the targets)."""
    prompt = arithmetic.prompt_tokens(tokenizer, row)
    answer = tokenizer.encode(row["extra_info"]["answer"], add_special_tokens=False) + [tokenizer.eos_token_id]
    tokens = prompt + answer
    return tokens, [0] * (len(prompt) - 1) + [1] * len(answer)


def main(argv: Optional[list[str]] = None) -> tuple[float, float]:
    """Train; returns (held-out accuracy before, after)."""
    args = parse_args(argv)
    with arithmetic.lora_run(args) as run:
        training, tokenizer = run.training, run.tokenizer
        _, before = run.starting_accuracy()
        started = time.perf_counter()
        for step in range(1, args.steps + 1):
            examples = [example(tokenizer, row) for row in run.rng.sample(run.train_rows, args.batch)]
            answer_tokens = sum(sum(marks) for _, marks in examples)
            data = [
                types.Datum(
                    model_input=types.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={"target_tokens": tokens[1:], "weights": [m / answer_tokens for m in marks]},
                )
                for tokens, marks in examples
            ]
            backward = training.forward_backward(data, "cross_entropy")
            optim = training.optim_step(types.AdamParams(learning_rate=args.lr))
            loss = backward.result().metrics["loss:sum"]
            optim.result()
            if step % 10 == 0 or step == args.steps:
                per_step = (time.perf_counter() - started) / step
                print(f"step {step}: answer-token NLL {loss:.4f}, {per_step:.2f} s/step", flush=True)
        state = training.save_state("final").result().path
        sampler = run.service.create_sampling_client(
            model_path=training.save_weights_for_sampler("final").result().path
        )
        after = run.accuracy(sampler.result())
        print(f"saved {state}", flush=True)
    print(f"sl_loop: held-out accuracy before={before:.3f} after={after:.3f}", flush=True)
    return before, after


if __name__ == "__main__":
    main()
