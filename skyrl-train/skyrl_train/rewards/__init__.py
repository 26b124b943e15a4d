"""Rewards beyond the environment's: user scoring functions run by reward managers, and a reward model.

| module | job |
|---|---|
| scorer | `RewardScorer`: the trainer's one call after generation; combines rule and model scores per row |
| managers | `naive`, `batch`, `parallel` reward managers (verl's names) and their registry |
| process_pool | `ScoringProcessPool`: long-lived scoring processes with a per-call time limit |
| pool_worker | the entry point of one scoring process |
| functions | loading `package.module:name` / `/path/file.py:name` functions and reading their results |
| model_input | rendering prompt + response with the reward model's tokenizer, truncation |

The reward-model worker itself is `skyrl_train.workers.reward_worker.RewardModelWorker`. This package imports no
torch at import time (the scoring processes import `functions` only).
"""
