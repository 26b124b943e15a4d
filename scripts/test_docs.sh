#!/usr/bin/env bash
# Build the documentation site in strict mode (a broken link or anchor between pages, or a page missing from the nav,
# fails) and run the site's build tests (pytest marker `docs`), in .venv-docs (created or reused; its packages are
# pinned in requirements-docs.txt). Extra arguments go to pytest. The built site lands in build/site.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="${SKYRL_DOCS_VENV:-$ROOT/.venv-docs}"
export NO_MKDOCS_2_WARNING=1  # Material's end-of-life banner, printed on every build

quiet_pip_warnings() { grep -v "^WARNING: Location" || true; }  # this machine's pip.conf names absent mirrors
log() { printf '\033[1;34m[docs]\033[0m %s\n' "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment at $VENV"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip --disable-pip-version-check install -q -r requirements-docs.txt 2> >(quiet_pip_warnings >&2)
log "mkdocs build --strict"
"$VENV/bin/python" -m mkdocs build --strict --clean
# the repository-wide pytest options name plugins .venv-docs does not need (asyncio): ignore those warnings
exec "$VENV/bin/python" -m pytest -m docs -W ignore::pytest.PytestConfigWarning tests/test_docs_site.py "$@"
