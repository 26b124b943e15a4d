"""NovaSky-AI/SkyRL's current-layout module path of its custom-loss example (the code is in examples/algorithm/).

python -m examples.train.algorithms.custom_policy_loss.main_custom_policy_loss <overrides> [--dry-run]
"""

import examples.algorithm.custom_policy_loss.main_custom_policy_loss  # noqa: F401  (registers it)
from skyrl_train.entrypoints.upstream_modules import run_upstream_module

if __name__ == "__main__":
    run_upstream_module("examples.train.algorithms.custom_policy_loss.main_custom_policy_loss")
