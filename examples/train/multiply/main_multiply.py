"""NovaSky-AI/SkyRL's multiply example entrypoint (current layout) at this module path, so its run script starts
unchanged here.

    python -m examples.train.multiply.main_multiply environment.env_class=multiply <overrides> [--dry-run]

Registers the `multiply` environment (`examples/multiply/multiply_env.py`) in this process, where the generator
runs, then runs `main_base`; see docs/migrating-from-skyrl.md. Run from the repository root.
"""

from examples.multiply.multiply_env import register_env
from skyrl_train.entrypoints.upstream_modules import run_upstream_module

register_env()

if __name__ == "__main__":
    run_upstream_module("examples.train.multiply.main_multiply")
