"""NovaSky-AI/SkyRL's example entrypoint at this module path, so SkyRL's run scripts start unchanged here.

    python -m examples.mini_swe_agent.main_mini_swe <overrides> [--dry-run]

Runs skyrl-agent's `mini_swe_agent` workflow (`skyrl_agent.mini_swe_agent`): see docs/migrating-from-skyrl.md.
"""

from typing import Optional

from skyrl_train.entrypoints.upstream_modules import run_upstream_module


def main(argv: Optional[list[str]] = None) -> None:
    """Run SkyRL's mini-swe-agent entrypoint here on `argv` (default: the process arguments)."""
    run_upstream_module("examples.mini_swe_agent.main_mini_swe", argv)


if __name__ == "__main__":
    main()
