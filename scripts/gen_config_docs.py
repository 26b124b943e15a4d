"""Regenerates docs/reference/configuration.md and ppo_base_config.yaml from the skyrl_train config dataclasses, and
docs/reference/skyrl-keys.md from the SkyRL dialect rules (config/upstream_keys.py).

python scripts/gen_config_docs.py           # write both files
python scripts/gen_config_docs.py --check   # exit 1 if either file is out of date
"""

import argparse
import sys
from pathlib import Path

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.cli import CONFIG_DIR, CONFIG_NAME
from skyrl_train.config.docgen import render_markdown, render_yaml
from skyrl_train.config.upstream_docs import render_upstream_markdown
from skyrl_train.entrypoints.upstream_modules import render_modules_markdown

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS_PATH = REPO_ROOT / "docs" / "reference" / "configuration.md"
YAML_PATH = CONFIG_DIR / f"{CONFIG_NAME}.yaml"
UPSTREAM_KEYS_PATH = REPO_ROOT / "docs" / "reference" / "skyrl-keys.md"


def generated_files() -> dict[Path, str]:
    """The path and expected content of every generated file."""
    return {
        DOCS_PATH: render_markdown(SkyRLConfig),
        YAML_PATH: render_yaml(SkyRLConfig),
        UPSTREAM_KEYS_PATH: render_upstream_markdown(render_modules_markdown()),
    }


def main(argv: list[str] | None = None) -> int:
    """Write the generated files, or with `--check` report which are stale; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the committed files are current")
    args = parser.parse_args(argv)
    stale = []
    for path, content in generated_files().items():
        current = path.read_text() if path.exists() else None
        if current == content:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    if args.check and stale:
        names = ", ".join(str(p.relative_to(REPO_ROOT)) for p in stale)
        print(f"out of date: {names}; run `python scripts/gen_config_docs.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
