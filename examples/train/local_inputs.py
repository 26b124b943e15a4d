"""The CPU inputs of the run scripts under examples/train: the embedded model and data built on this machine.

    python examples/train/local_inputs.py addition --out DIR     # DIR/model and DIR/data/{train,test}.parquet

Every kind links `DIR/model` to the cached embedded model (warm-started once under $SKYRL_CACHE, the quickstart's:
2-digit addition, ~0.4 M parameters) and writes its data under `DIR/data`. The kinds:

| kind | data | also |
|---|---|---|
| `addition` | 2-digit sums, env `addition` | |
| `multi_turn` | the same sums, env `gsm8k_multi_turn` (a wrong answer gets feedback and another try) | |
| `search` | "what is a+b?" questions, env `search` | `DIR/corpus.jsonl`: one passage per sum, for the retrieval server |
| `text2sql` | "what is a+b?" questions with gold SQL, env `text2sql` | `DIR/db/sums.sqlite`: a table of sums |
| `judge` | sums whose training rows ask for the reward model (`reward_spec.method: reward_model`) | `DIR/judge`: a reward model fitted to judge sums |
| `agent` | none (skyrl_agent.entrypoint writes its own) | `DIR/model` is the embedded *agent* model |
| `mini_swe` | SWE task instances for mini-swe-agent's `local` environment: skyrl-agent's generated one-bug repositories (`skyrl_agent.mini_swe_agent.local_task_rows`) | |

The test split is the warm start's held-out split, so no test problem was seen before RL. Re-running a kind rewrites
its data and reuses the cached models.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sqlite3
import sys
from pathlib import Path
from typing import Any

MODEL = {"task": "addition", "difficulty": 2, "size": 2, "seed": 0, "train_examples": 8192}
"""The embedded model's settings: the quickstart's, so every example and test shares one cache entry."""
KINDS = ("addition", "multi_turn", "search", "text2sql", "judge", "agent", "mini_swe")
JUDGE_VERSION = "1"
"""Bump when the judge's recipe changes (it renames the judge's cache entry)."""


def link(target: Path, link_path: Path) -> None:
    """Make `link_path` a symlink to `target`, replacing what was there."""
    link_path.parent.mkdir(parents=True, exist_ok=True)
    if link_path.is_symlink() or link_path.is_file():
        link_path.unlink()
    elif link_path.exists():
        raise SystemExit(f"{link_path} is a folder; remove it or choose another --out")
    link_path.symlink_to(target, target_is_directory=True)


def addition_splits(train_size: int, test_size: int) -> dict[str, list[dict[str, Any]]]:
    """Train and test rows of 2-digit addition; the test split is the warm start's held-out split (seed 0)."""
    from skyrl_gym.envs.synthetic.generate import generate_splits

    return generate_splits(
        "addition", train_size=train_size, test_size=test_size, difficulty=MODEL["difficulty"], seed=MODEL["seed"]
    )


def write_splits(out: Path, splits: dict[str, list[dict[str, Any]]]) -> None:
    """`out/data/train.parquet` and `out/data/test.parquet`."""
    from skyrl_gym.envs.synthetic.generate import write_rows

    for split, rows in splits.items():
        write_rows(rows, out / "data" / f"{split}.parquet")


def restyle(splits: dict[str, list[dict[str, Any]]], env_class: str, **extras: Any) -> None:
    """Point every row at `env_class`, with extra columns `extras` (a callable value is called with the row)."""
    for rows in splits.values():
        for row in rows:
            row["env_class"] = env_class
            for key, value in extras.items():
                row[key] = value(row) if callable(value) else value


def operands(row: dict[str, Any]) -> tuple[int, int]:
    """The two operands of an addition row (`12+45=` -> (12, 45))."""
    first, second = row["extra_info"]["question"].removesuffix("=").split("+")
    return int(first), int(second)


def write_search(out: Path, splits: dict[str, list[dict[str, Any]]]) -> None:
    """Search rows (the question, the sum as the target) and a corpus with one passage per sum asked."""
    passages = []
    for rows in splits.values():
        for row in rows:
            first, second = operands(row)
            passages.append(
                {"id": len(passages), "title": f"{first}+{second}", "text": f"{first}+{second}={first + second}"}
            )
            row["prompt"] = [{"role": "user", "content": f"{first}+{second}="}]
            row["reward_spec"] = {"method": "rule", "ground_truth": {"target": [str(first + second)]}}
    restyle(splits, "search")
    (out / "corpus.jsonl").write_text("".join(json.dumps(passage) + "\n" for passage in passages))


def write_text2sql(out: Path, splits: dict[str, list[dict[str, Any]]]) -> None:
    """Text-to-SQL rows over `out/db/sums.sqlite`, a table `sums(a, b, total)` holding every sum asked."""
    db = out / "db" / "sums.sqlite"
    db.parent.mkdir(parents=True, exist_ok=True)
    db.unlink(missing_ok=True)
    facts = sorted({operands(row) for rows in splits.values() for row in rows})
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE sums (a INTEGER, b INTEGER, total INTEGER)")
        connection.executemany("INSERT INTO sums VALUES (?, ?, ?)", [(a, b, a + b) for a, b in facts])
    connection.close()
    for rows in splits.values():
        for row in rows:
            first, second = operands(row)
            row["reward_spec"] = {
                "method": "rule",
                "ground_truth": f"SELECT total FROM sums WHERE a={first} AND b={second}",
            }
    restyle(splits, "text2sql", db_id="sums")


def judge_examples(rng: random.Random, rows: list[dict[str, Any]]) -> list[tuple[list[dict[str, str]], str, float]]:
    """(prompt, response, label) triples: each sum's right answer (1) and wrong ones of the kinds a sampling policy
    writes (off by one or ten, a digit dropped or added, another number; 0)."""
    examples = []
    for row in rows:
        answer = int(row["reward_spec"]["ground_truth"])
        wrong = {
            answer + rng.choice((-10, -1, 1, 10)),
            answer // 10,
            answer * 10 + rng.randrange(10),
            rng.randrange(200),
        }
        wrong.discard(answer)
        examples.append((row["prompt"], str(answer), 1.0))
        examples += [(row["prompt"], str(value), 0.0) for value in sorted(wrong)]
    return examples


def fit_judge(model_dir: Path, folder: Path, steps: int = 3000, lr: float = 1e-3, seed: int = 0) -> dict[str, Any]:
    """Fit a sequence-classification head (and the backbone) on the embedded model to judge sums; save it in `folder`.

    The reward model starts from the embedded model's weights, reads what the trainer's reward model reads
    (`render_conversation`: prompt and response in its chat template) and scores at the last token; it learns with a
    logistic loss to tell right sums from wrong ones. Its accuracy on sums it never saw is recorded in `judge.json`.
    """
    import torch
    from transformers import Qwen2ForSequenceClassification

    from skyrl_train.models.loading import load_causal_lm, load_tokenizer
    from skyrl_train.models.tokenizer import save_tokenizer
    from skyrl_train.rewards.model_input import render_conversation
    from skyrl_train.workers.reward_worker import ScoringBatch

    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = load_tokenizer(str(model_dir))
    causal = load_causal_lm(str(model_dir))
    config = causal.config
    config.num_labels, config.pad_token_id = 1, tokenizer.pad_token_id
    judge = Qwen2ForSequenceClassification(config)
    judge.model.load_state_dict(causal.model.state_dict())
    splits = addition_splits(train_size=4000, test_size=256)  # its test split is also the RL runs' held-out one
    data = {split: judge_examples(rng, rows) for split, rows in splits.items()}

    def scores(batch: list[tuple[list[dict[str, str]], str, float]]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = ScoringBatch([render_conversation(tokenizer, prompt, response) for prompt, response, _ in batch])
        input_ids, attention, positions = ids.padded(tokenizer.pad_token_id)
        hidden = judge.model(input_ids=input_ids, attention_mask=attention, position_ids=positions).last_hidden_state
        return judge.score(hidden[:, -1]).squeeze(-1), torch.tensor([label for _, _, label in batch])

    positives = sum(label for _, _, label in data["train"])
    pos_weight = torch.tensor((len(data["train"]) - positives) / positives)  # right and wrong answers weigh the same
    optimizer = torch.optim.AdamW(judge.parameters(), lr=lr, weight_decay=0.0)
    judge.train()
    for _ in range(steps):
        logits, labels = scores(rng.sample(data["train"], 64))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, pos_weight=pos_weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    judge.eval()
    with torch.no_grad():
        logits, labels = scores(data["test"])
    right = (logits > 0).float() == labels
    accuracy = (right[labels == 1].float().mean().item() + right[labels == 0].float().mean().item()) / 2
    folder.mkdir(parents=True, exist_ok=True)
    judge.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    description = {
        "steps": steps,
        "seed": seed,
        "held_out_examples": len(labels),
        "held_out_balanced_accuracy": accuracy,
    }
    (folder / "judge.json").write_text(json.dumps(description, indent=2) + "\n")
    return description


def get_judge(model_dir: Path) -> Path:
    """The judge fitted on `model_dir`, built once and cached next to the embedded models."""
    from skyrl_train.recipes.embedded import build_cached, cache_root, read_description

    key = hashlib.sha256(f"{JUDGE_VERSION}/{read_description(model_dir)['cache_key']}".encode()).hexdigest()[:16]
    return build_cached(
        cache_root() / "examples" / f"judge-{key}",
        lambda folder: (folder / "judge.json").is_file() and (folder / "model.safetensors").is_file(),
        lambda folder: fit_judge(model_dir, folder),
    )


def main(argv: list[str] | None = None) -> int:
    """Build or reuse the models, write the data, print what is where."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--out", required=True, help="the run's folder (model link, data, ...)")
    parser.add_argument("--train-size", type=int, default=2000)
    parser.add_argument("--test-size", type=int, default=200, help="at most 256: the warm start's held-out split")
    args = parser.parse_args(argv)
    if not 1 <= args.test_size <= 256 or args.train_size < 1:
        parser.error("--test-size must be in [1, 256] (the warm start's held-out split) and --train-size >= 1")
    out = Path(args.out).resolve()
    if args.kind == "agent":
        from skyrl_agent.warm_start import get_agent_model

        link(Path(get_agent_model()), out / "model")
        print(f"local inputs: {out}/model -> the embedded agent model")
        return 0

    from skyrl_train.recipes.embedded import get_embedded_model
    from skyrl_train.recipes.warm_start import WarmStartSettings

    model_dir = get_embedded_model(WarmStartSettings(**MODEL))
    link(model_dir, out / "model")
    if args.kind == "mini_swe":
        from skyrl_agent.mini_swe_agent import local_task_rows

        splits = {
            split: local_task_rows(size, seed=0, split=split)
            for split, size in [("train", args.train_size), ("test", args.test_size)]
        }
        write_splits(out, splits)
        print(f"local inputs: {out}/model -> {model_dir}; mini_swe task instances in {out}/data")
        return 0
    splits = addition_splits(args.train_size, args.test_size)
    if args.kind == "multi_turn":
        restyle(splits, "gsm8k_multi_turn")
    elif args.kind == "search":
        write_search(out, splits)
    elif args.kind == "text2sql":
        write_text2sql(out, splits)
    elif args.kind == "judge":
        link(get_judge(model_dir), out / "judge")
        for row in splits["train"]:  # training rewards come from the judge; held-out accuracy from the exact rule
            row["reward_spec"] = {**row["reward_spec"], "method": "reward_model"}
    write_splits(out, splits)
    print(f"local inputs: {out}/model -> {model_dir}; {args.kind} data in {out}/data")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
