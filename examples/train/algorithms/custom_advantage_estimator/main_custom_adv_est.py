"""NovaSky-AI/SkyRL's current-layout module path of its custom-estimator example (the code is in examples/algorithm/).

python -m examples.train.algorithms.custom_advantage_estimator.main_custom_adv_est <overrides> [--dry-run]
"""

import examples.algorithm.custom_advantage_estimator.main_custom_adv_est  # noqa: F401  (registers it)
from skyrl_train.entrypoints.upstream_modules import run_upstream_module

if __name__ == "__main__":
    run_upstream_module("examples.train.algorithms.custom_advantage_estimator.main_custom_adv_est")
