"""NovaSky-AI/SkyRL's example entrypoint at this module path, so SkyRL's run scripts start unchanged here.

    python -m examples.llm_as_a_judge.main_llm_judge <overrides> [--dry-run]

Runs this project's main_base: see `skyrl_train.entrypoints.upstream_modules` and docs/migrating-from-skyrl.md.
"""

from skyrl_train.entrypoints.upstream_modules import run_upstream_module

if __name__ == "__main__":
    run_upstream_module("examples.llm_as_a_judge.main_llm_judge")
