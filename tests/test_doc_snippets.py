"""Run the fenced code of the user-facing pages: every ```python block and every shell command, unless marked skip.

Pages: README.md, CLAUDE.md, docs/**/*.md and examples/*/README.md. A marker is an HTML comment on the line right
above a fence (invisible when the page is rendered):

    <!-- snippet: skip (reason) -->           do not run this block; the reason is required
    <!-- snippet: setup NAME -->              python: build what the page's text says exists first (see SETUPS)
    <!-- snippet: run -->                     shell: run each command as written
    <!-- snippet: run-with k=v ... -->        shell: run each command with these arguments appended (short runs)

The python blocks of one page run in order in one namespace, in a fresh temporary working directory, in a child
interpreter with a timeout. A shell block must carry a marker, unless each of its commands is a `--dry-run` or
`--help` form, which runs as written. Shell commands run with bash in a temporary directory that links the
repository's top-level folders (so `scripts/...` and `examples/...` resolve and outputs land in the temporary
directory); `.venv/bin/python` and a bare `python` mean the interpreter running the tests.
"""

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHELL_LANGUAGES = ("bash", "sh", "console")
MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<body>.*?)\s*-->$")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
TIMEOUT_S = 240


@dataclass
class Block:
    """One fenced code block: where it is, its language, its text and the marker above it (or None)."""

    page: str
    line: int
    lang: str
    code: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    """The pages whose code is tested."""
    found = [REPO / "README.md", REPO / "CLAUDE.md"]
    found += sorted((REPO / "docs").rglob("*.md")) + sorted((REPO / "examples").glob("*/README.md"))
    return [page for page in found if page.exists()]


def parse_blocks(page: Path) -> list[Block]:
    """Every fenced block of a page with the snippet marker on the line above its opening fence."""
    lines = page.read_text().splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        above = MARKER.match(lines[index - 1].strip()) if index > 0 else None
        blocks.append(
            Block(
                page=str(page.relative_to(REPO)),
                line=index + 1,
                lang=opening.group("lang"),
                code="\n".join(lines[index + 1 : end]),
                marker=above.group("body") if above else None,
            )
        )
        index = end + 1
    return blocks


def marker_kind(block: Block) -> tuple[str, str]:
    """Split a marker into (kind, argument); a skip without a reason in parentheses is an error."""
    if block.marker is None:
        return "", ""
    kind, _, argument = block.marker.partition(" ")
    argument = argument.strip()
    if kind == "skip":
        reason = re.fullmatch(r"\((.*\S.*)\)", argument)
        if reason is None:
            raise ValueError(
                f"{block.where}: `snippet: skip` needs a reason, e.g. <!-- snippet: skip (needs a GPU) -->"
            )
        return kind, reason.group(1)
    if kind not in ("setup", "run", "run-with"):
        raise ValueError(f"{block.where}: unknown snippet marker {block.marker!r}; expected skip, setup, run, run-with")
    if kind == "setup" and argument not in SETUPS:
        raise ValueError(f"{block.where}: unknown setup {argument!r}; known: {sorted(SETUPS)}")
    if (kind == "setup") != (block.lang == "python"):
        raise ValueError(f"{block.where}: `{kind}` does not apply to a ```{block.lang} block")
    return kind, argument


# Setups: python source run in the page's namespace before its first block, building what the page says exists.
SETUPS: dict[str, str] = {
    "tiny_model": textwrap.dedent("""
        from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
        from skyrl_train.models.tokenizer import build_char_tokenizer
        build_tiny_model(TinyModelSpec(size=1), seed=0).save_pretrained("tiny_model")
        build_char_tokenizer().save_pretrained("tiny_model")
        """),
}


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in parse_blocks(page)]


def python_pages() -> dict[str, list[Block]]:
    """The python blocks of each page that has any, in page order."""
    grouped: dict[str, list[Block]] = {}
    for block in all_blocks():
        if block.lang == "python":
            grouped.setdefault(block.page, []).append(block)
    return grouped


def shell_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.lang in SHELL_LANGUAGES]


def child_env() -> dict[str, str]:
    """The test's environment with this checkout's packages first on the path."""
    env = dict(os.environ)
    packages = [str(REPO / name) for name in ("skyrl-gym", "skyrl-train", "skyrl-agent", "skyrl-tx")]
    env["PYTHONPATH"] = os.pathsep.join(packages + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHON"] = sys.executable  # scripts that take their interpreter from $PYTHON (examples/gsm8k/run_gsm8k.sh)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def test_every_marker_is_well_formed():
    """A malformed marker (unknown kind, skip without a reason) fails here rather than being ignored."""
    errors = []
    for block in all_blocks():
        try:
            marker_kind(block)
        except ValueError as error:
            errors.append(str(error))
    assert not errors, "\n".join(errors)


def test_skip_without_reason_is_refused():
    bare = Block(page="x.md", line=3, lang="python", code="", marker="skip")
    with pytest.raises(ValueError, match="x.md:3.*needs a reason"):
        marker_kind(bare)
    assert marker_kind(Block("x.md", 3, "python", "", "skip (needs a GPU)")) == ("skip", "needs a GPU")


@pytest.mark.parametrize("page", sorted(python_pages()))
def test_python_blocks_run(page, tmp_path):
    """The page's python blocks, in order, in one namespace: each must run without an error."""
    blocks = python_pages()[page]
    runnable = [block for block in blocks if marker_kind(block)[0] != "skip"]
    if not runnable:
        pytest.skip(f"{page}: every python block is marked skip")
    parts = ["__ns__ = {'__name__': '__main__'}"]
    for block in blocks:
        kind, argument = marker_kind(block)
        if kind == "skip":
            continue
        if kind == "setup":
            parts.append(f"exec(compile({SETUPS[argument]!r}, 'setup {argument}', 'exec'), __ns__)")
        parts.append(f"print('--- {block.where}', flush=True)")
        parts.append(f"exec(compile({block.code!r}, {block.where!r}, 'exec'), __ns__)")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    result = subprocess.run(
        [sys.executable, "-c", "\n".join(parts)],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert result.returncode == 0, f"{page}: a python block failed\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def command_lines(code: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments and `$ ` prompts dropped."""
    commands, current = [], ""
    for raw in code.splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        commands.append(re.sub(r"\s+#.*$", "", current + line).strip())
        current = ""
    return commands


def interpreter_for(command: str) -> str:
    """`.venv/bin/python` and a leading `python` mean this interpreter."""
    command = command.replace(".venv/bin/python", sys.executable)
    return re.sub(r"(^|(?<=\s))python(?=\s)", sys.executable, command, count=1)


@pytest.mark.parametrize("block", shell_blocks(), ids=lambda block: block.where)
def test_shell_block(block, tmp_path):
    """Run the block's commands (as written or with the marker's arguments), or check it is marked skip."""
    kind, argument = marker_kind(block)
    commands = command_lines(block.code)
    if kind == "skip":
        pytest.skip(f"{block.where}: {argument}")
    if kind == "":
        plain = [command for command in commands if "--dry-run" not in command and "--help" not in command]
        assert not plain, (
            f"{block.where}: shell commands {plain} have no marker; add <!-- snippet: run -->, "
            "<!-- snippet: run-with key=value ... --> or <!-- snippet: skip (reason) --> above the fence"
        )
    for name in ("scripts", "examples", "skyrl-gym", "skyrl-train", "skyrl-agent", "skyrl-tx"):
        (tmp_path / name).symlink_to(REPO / name)
    for command in commands:
        full = interpreter_for(command) + (f" {argument}" if kind == "run-with" else "")
        result = subprocess.run(
            ["bash", "-c", full], cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=TIMEOUT_S
        )
        assert (
            result.returncode == 0
        ), f"{block.where}: `{full}` failed\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
