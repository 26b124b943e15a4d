"""MkDocs hook: links from a docs page to a repository file outside docs/ (e.g. `../examples/minimal_grpo.py`).

On GitHub such a relative link opens the file, but MkDocs only knows the files under docs/, so `mkdocs build --strict`
would refuse it. This hook copies every repository file that a page links to into the site under `repo/<path>` and
points the link there. A link whose target does not exist is left as written, so strict mode still fails on it, as
it does on a broken link or anchor between pages. Markdown files outside docs/ are not copied (MkDocs would render
them as pages of their own, whose links break): link the docs page that covers them, or name them as `code`.
Registered in mkdocs.yml under `hooks:`.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any, Optional

SITE_FOLDER = "repo"
"""Where copied repository files live in the built site."""

LINK = re.compile(r"(?P<head>\]\()(?P<target>[^)\s#]+)(?P<tail>(?:#[^)\s]*)?\))")
"""The target of an inline markdown link `[text](target#anchor)` (anchor optional)."""


def outside_target(page: str, target: str, docs_dir: Path, repo: Path) -> Optional[str]:
    """The repository path (posix, relative to `repo`) that `target` names from the page `page` (a path relative
    to `docs_dir`), when it is an existing non-markdown file inside the repository but outside `docs_dir`; else None."""
    if "://" in target or target.startswith(("/", "mailto:")) or target.endswith(".md"):
        return None
    docs_dir, repo = docs_dir.resolve(), repo.resolve()
    resolved = ((docs_dir / page).parent / target).resolve()
    if not resolved.is_file() or resolved.is_relative_to(docs_dir) or not resolved.is_relative_to(repo):
        return None
    return resolved.relative_to(repo).as_posix()


def rewrite_links(markdown: str, page: str, docs_dir: Path, repo: Path) -> tuple[str, set[str]]:
    """The page text with each link to an outside repository file pointed at its copy under `SITE_FOLDER`, and the
    set of repository paths it links to."""
    linked: set[str] = set()

    def point_at_copy(match: re.Match) -> str:
        path = outside_target(page, match.group("target"), docs_dir, repo)
        if path is None:
            return match.group(0)
        linked.add(path)
        copy = posixpath.relpath(f"{SITE_FOLDER}/{path}", posixpath.dirname(page) or ".")
        return match.group("head") + copy + match.group("tail")

    return LINK.sub(point_at_copy, markdown), linked


def _dirs(config: Any) -> tuple[Path, Path]:
    docs_dir = Path(config["docs_dir"])
    return docs_dir, Path(config["config_file_path"]).resolve().parent


def on_files(files: Any, config: Any) -> Any:
    """Add a copy of every repository file some page links to (MkDocs then resolves those links as site files)."""
    from mkdocs.structure.files import File

    docs_dir, repo = _dirs(config)
    linked: set[str] = set()
    for file in files.documentation_pages():
        linked |= rewrite_links(Path(file.abs_src_path).read_text(encoding="utf-8"), file.src_uri, docs_dir, repo)[1]
    for path in sorted(linked):
        files.append(File.generated(config, f"{SITE_FOLDER}/{path}", abs_src_path=str(repo / path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Point the page's links to outside repository files at their copies."""
    docs_dir, repo = _dirs(config)
    return rewrite_links(markdown, page.file.src_uri, docs_dir, repo)[0]
