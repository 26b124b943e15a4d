"""NovaSky-AI/SkyRL's `skyrl.train.entrypoints.main_base` module path, run by this project.

    python -m skyrl.train.entrypoints.main_base <overrides in SkyRL's or this project's spelling> [--dry-run]

See `skyrl_train.entrypoints.upstream_modules` and docs/migrating-from-skyrl.md.
"""

from skyrl_train.entrypoints.upstream_modules import run_upstream_module

if __name__ == "__main__":
    run_upstream_module("skyrl.train.entrypoints.main_base")
