"""NovaSky-AI/SkyRL's legacy `skyrl_train.entrypoints.main_generate` module path (generation-only runs).

This project has no generation-only run yet, so the module refuses by name instead of failing as a missing module;
see `skyrl_train.entrypoints.upstream_modules` and docs/migrating-from-skyrl.md.
"""

from skyrl_train.entrypoints.upstream_modules import run_upstream_module

if __name__ == "__main__":
    run_upstream_module("skyrl_train.entrypoints.main_generate")
