"""The documentation site: mkdocs.yml lists every page of docs/, the repository-link hook rewrites the right links, and
a strict build fails on a broken link or anchor (tests marked `docs`: they need mkdocs, which
`bash scripts/test_docs.sh` installs into .venv-docs and runs them with)."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mkdocs_repo_links", REPO / "scripts" / "mkdocs_repo_links.py")
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)

needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="needs mkdocs and mkdocs-material: bash scripts/test_docs.sh installs them into .venv-docs and runs these",
)


def nav_pages(nav: list) -> list[str]:
    """Every page path named in a mkdocs nav (nested sections flattened)."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def site_config() -> dict:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text())


def test_nav_lists_every_docs_page_once_and_only_pages_that_exist():
    config = site_config()
    docs = REPO / config["docs_dir"]
    listed = nav_pages(config["nav"])
    on_disk = sorted(path.relative_to(docs).as_posix() for path in docs.rglob("*.md"))
    assert sorted(listed) == on_disk, f"nav {sorted(listed)} differs from the pages in docs/ {on_disk}"
    assert len(listed) == len(set(listed))
    assert listed[0] == "index.md" and "reference/configuration.md" in listed and "performance.md" in listed


def test_site_builds_strictly_with_the_repository_link_hook():
    config = site_config()
    assert config["strict"] is True and config["theme"]["name"] == "material"
    assert config["hooks"] == ["scripts/mkdocs_repo_links.py"]
    assert all(config["validation"][key] == "warn" for key in ("omitted_files", "unrecognized_links", "anchors"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with docs/{index,guide/page}.md, examples/run.py and examples/README.md."""
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "docs" / "index.md").write_text("# Home\n")
    (tmp_path / "docs" / "guide" / "page.md").write_text("# Page\n\n## A section\n")
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "run.py").write_text("print('hi')\n")
    (tmp_path / "examples" / "README.md").write_text("# Examples\n")
    return tmp_path


def test_links_to_repository_files_point_at_their_copies(repo):
    docs = repo / "docs"
    text = "[a](../examples/run.py) [b](../../examples/run.py#L1) [c](page.md#a-section) ![p](../../examples/run.py)"
    rewritten, linked = hook.rewrite_links(text, "guide/page.md", docs, repo)
    # from docs/guide/page.md, ../../examples/run.py is the repository file; ../examples/run.py is docs/examples/run.py
    assert linked == {"examples/run.py"}
    assert rewritten == (
        "[a](../examples/run.py) [b](../repo/examples/run.py#L1) [c](page.md#a-section) ![p](../repo/examples/run.py)"
    )
    top, linked_top = hook.rewrite_links("[a](../examples/run.py)", "index.md", docs, repo)
    assert top == "[a](repo/examples/run.py)" and linked_top == {"examples/run.py"}


def test_links_the_hook_leaves_alone(repo):
    docs = repo / "docs"
    for link in (
        "[missing](../examples/gone.py)",  # stays broken, so a strict build fails on it
        "[readme](../examples/README.md)",  # markdown outside docs/ would become an unlisted page
        "[page](guide/page.md)",
        "[web](https://example.org/x.py)",
        "[outside the repository](../../etc/hosts)",
    ):
        assert hook.rewrite_links(link, "index.md", docs, repo) == (link, set())


def build(repo: Path, pages: dict[str, str], nav: list[str] | None = None) -> subprocess.CompletedProcess:
    """Write `pages` into docs/ and build the site strictly with this repository's mkdocs.yml and hook; the nav is
    `nav`, by default every page in docs/."""
    for name, text in pages.items():
        (repo / "docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / "docs" / name).write_text(text)
    config = site_config()
    on_disk = sorted(path.relative_to(repo / "docs").as_posix() for path in (repo / "docs").rglob("*.md"))
    config["nav"] = [{name: name} for name in (on_disk if nav is None else nav)]
    (repo / "mkdocs.yml").write_text(yaml.safe_dump(config))
    (repo / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / "scripts" / "mkdocs_repo_links.py", repo / "scripts")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(repo / "mkdocs.yml")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.docs
@needs_mkdocs
def test_strict_build_copies_linked_repository_files(repo):
    result = build(repo, {"index.md": "# Home\n\n[run](../examples/run.py), [page](guide/page.md#a-section)\n"})
    assert result.returncode == 0, result.stderr
    assert (repo / "build" / "site" / "repo" / "examples" / "run.py").read_text() == "print('hi')\n"
    assert 'href="repo/examples/run.py"' in (repo / "build" / "site" / "index.html").read_text()


@pytest.mark.docs
@needs_mkdocs
@pytest.mark.parametrize(
    "link, complaint",
    [
        ("[gone](guide/gone.md)", "'guide/gone.md', but the target is not found"),
        ("[anchor](guide/page.md#no-such-section)", "does not contain an anchor '#no-such-section'"),
        ("[gone](../examples/gone.py)", "'../examples/gone.py', but the target is not found"),
    ],
)
def test_strict_build_fails_on_a_broken_link(repo, link, complaint):
    result = build(repo, {"index.md": f"# Home\n\n{link}\n"})
    assert result.returncode != 0 and complaint in result.stderr, result.stderr


@pytest.mark.docs
@needs_mkdocs
def test_strict_build_fails_on_a_page_missing_from_the_nav(repo):
    result = build(repo, {"orphan.md": "# Orphan\n"}, nav=["index.md", "guide/page.md"])
    assert result.returncode != 0 and "orphan.md" in result.stderr, result.stderr
