"""NovaSky-AI/SkyRL's example entrypoint at this module path, so SkyRL's run scripts start unchanged here.

    python -m examples.on_policy_distillation.main_on_policy_distill <overrides> [--dry-run]

Runs this project's main_base: see `skyrl_train.entrypoints.upstream_modules` and docs/migrating-from-skyrl.md.
"""

from skyrl_train.entrypoints.upstream_modules import run_upstream_module

if __name__ == "__main__":
    run_upstream_module("examples.on_policy_distillation.main_on_policy_distill")
