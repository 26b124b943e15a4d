"""Run the fenced code of the user-facing pages: every ```python block and every shell command, unless marked skip.

Pages: README.md, CLAUDE.md, docs/**/*.md and examples/*/README.md. A marker is an HTML comment on the line right
above a fence (invisible when the page is rendered):

    <!-- snippet: skip (reason) -->           do not run this block; the reason is required
    <!-- snippet: setup NAME -->              python: build what the page's text says exists first (see SETUPS)
    <!-- snippet: run -->                     shell: run each command as written
    <!-- snippet: run-with ARGS -->           shell: run each command with ARGS appended: `--dry-run` (checks the
                                              command's options and config overrides without training) or short-run
                                              overrides such as `trainer.max_training_steps=1`
    <!-- snippet: output -->                  any fence: what the nearest code block above it prints (see below)

The python blocks of one page run in order in one namespace, in a fresh temporary working directory, in a child
interpreter with a timeout. A shell block must carry a marker, unless each of its commands is a `--dry-run` or
`--help` form, which runs as written. Shell commands run with bash in a temporary directory that links the
repository's top-level folders (so `scripts/...` and `examples/...` resolve and outputs land in the temporary
directory); `.venv/bin/python` and a bare `python` mean the interpreter running the tests, and
`bash scripts/quickstart.sh` means `python examples/quickstart/run_quickstart.py` (the script's set-up step installs
packages; what it runs afterwards is that command, which `test_quickstart_sh_runs_the_quickstart_script` checks).
An argument `...` stands for the reader's own arguments (model, data) and is dropped, so with `run-with --dry-run`
the rest of the command is checked against the defaults. Plain python commands (no pipes, redirections or shell
variables) run through one warm interpreter that imports the stack once and forks a process per command.

An `output` block is compared with the standard output of the code block above it (all its commands, for a shell
block): line by line after dropping trailing spaces and leading/trailing blank lines. Two notations cover what
differs between machines and runs: a line `...` matches any number of lines, and `…` inside a line matches any
text on that line. Nothing else is normalised, so only deterministic output gets an `output` block.
"""

import json
import os
import re
import shlex
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
    if kind not in ("setup", "run", "run-with", "output"):
        raise ValueError(
            f"{block.where}: unknown snippet marker {block.marker!r}; expected skip, setup, run, run-with, output"
        )
    if kind == "run-with" and not argument:
        raise ValueError(f"{block.where}: `snippet: run-with` needs the arguments to append, e.g. --dry-run")
    if kind == "output" and block.lang in SHELL_LANGUAGES + ("python",):
        raise ValueError(f"{block.where}: an `output` block shows printed text; use ```text, not ```{block.lang}")
    if kind == "setup" and argument not in SETUPS:
        raise ValueError(f"{block.where}: unknown setup {argument!r}; known: {sorted(SETUPS)}")
    applies = {"setup": block.lang == "python", "output": True}.get(kind, block.lang in SHELL_LANGUAGES)
    if not applies:
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


def shown_outputs(blocks: list[Block]) -> dict[str, Block]:
    """The `output` blocks of a page's blocks, keyed by the `where` of the code block each one belongs to."""
    shown, previous = {}, None
    for block in blocks:
        kind = marker_kind(block)[0]
        if kind != "output":
            previous = block
            continue
        if previous is None or previous.lang not in SHELL_LANGUAGES + ("python",):
            raise ValueError(f"{block.where}: an `output` block must follow a python or shell block")
        if marker_kind(previous)[0] == "skip":
            raise ValueError(f"{block.where}: the block above ({previous.where}) is skipped, so nothing checks it")
        if previous.where in shown:
            raise ValueError(f"{block.where}: {previous.where} already has an `output` block")
        shown[previous.where] = block
    return shown


def output_pattern(shown: str) -> re.Pattern[str]:
    """The regex an `output` block stands for: `...` lines match any lines, `…` any text within a line."""
    parts = []
    for line in _trimmed_lines(shown):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("".join(".*?" if piece == "…" else re.escape(piece) for piece in re.split("(…)", line)))
            parts.append(r"\n")
    return re.compile("".join(parts))


def _trimmed_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def check_output(block: Block, shown: Block, printed: str) -> None:
    """Fail with both texts when what `block` printed is not what its `output` block shows."""
    actual = "".join(line + "\n" for line in _trimmed_lines(printed))
    assert output_pattern(shown.code).fullmatch(actual), (
        f"{shown.where}: the output shown for {block.where} differs from what it prints "
        f"(`...` lines match any lines, `…` any text on a line)\n--- shown:\n{shown.code}\n--- printed:\n{actual}"
    )


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


def page_outputs() -> dict[str, dict[str, Block]]:
    """Every page's `output` blocks (see `shown_outputs`)."""
    grouped: dict[str, list[Block]] = {}
    for block in all_blocks():
        grouped.setdefault(block.page, []).append(block)
    return {page: shown_outputs(blocks) for page, blocks in grouped.items()}


def test_every_marker_is_well_formed():
    """A malformed marker (unknown kind, skip without a reason, an output block with nothing to check) fails here."""
    errors = []
    for block in all_blocks():
        try:
            marker_kind(block)
        except ValueError as error:
            errors.append(str(error))
    try:
        page_outputs()
    except ValueError as error:
        errors.append(str(error))
    assert not errors, "\n".join(errors)


def test_skip_without_reason_is_refused():
    bare = Block(page="x.md", line=3, lang="python", code="", marker="skip")
    with pytest.raises(ValueError, match="x.md:3.*needs a reason"):
        marker_kind(bare)
    assert marker_kind(Block("x.md", 3, "python", "", "skip (needs a GPU)")) == ("skip", "needs a GPU")


def test_output_markers_are_checked_for_what_they_follow():
    code = Block("x.md", 1, "python", "print(1)", None)
    shown = Block("x.md", 5, "text", "1", "output")
    assert shown_outputs([code, shown]) == {"x.md:1": shown}
    with pytest.raises(ValueError, match="x.md:5: the block above .*skipped"):
        shown_outputs([Block("x.md", 1, "python", "", "skip (GPU)"), shown])
    with pytest.raises(ValueError, match="must follow a python or shell block"):
        shown_outputs([Block("x.md", 1, "json", "{}", None), shown])
    with pytest.raises(ValueError, match="use ```text"):
        marker_kind(Block("x.md", 5, "python", "1", "output"))
    with pytest.raises(ValueError, match="needs the arguments"):
        marker_kind(Block("x.md", 5, "bash", "ls", "run-with"))


def test_output_pattern_notation():
    shown = "first\n...\nstep … done\n"
    assert output_pattern(shown).fullmatch("first\nstep 3 in 1.2 s done\n")
    assert output_pattern(shown).fullmatch("first\nany\nlines\nstep 3 done\n")
    assert not output_pattern(shown).fullmatch("first\nstep 3 done\nextra\n")  # nothing after the last line
    assert not output_pattern(shown).fullmatch("second\nstep 3 done\n")
    assert not output_pattern("a … b\n").fullmatch("a x\ny b\n")  # `…` stays within one line
    assert output_pattern("x = 1.5 (a+b)").fullmatch("x = 1.5 (a+b)\n")  # everything else is literal
    assert not output_pattern("x = 1.5").fullmatch("x = 1.50\n")


SEPARATOR = "\x1e--- snippet "


@pytest.mark.parametrize("page", sorted(python_pages()))
def test_python_blocks_run(page, tmp_path):
    """The page's python blocks, in order, in one namespace: each must run, and print what its `output` block shows."""
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
        parts.append(f"print({SEPARATOR + block.where!r}, flush=True)")
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
    printed = {}
    for section in result.stdout.split(SEPARATOR)[1:]:
        where, _, text = section.partition("\n")
        printed[where] = text
    for where, shown in page_outputs().get(page, {}).items():
        block = next((block for block in blocks if block.where == where), None)
        if block is not None:  # outputs of shell blocks are checked where those run
            check_output(block, shown, printed[where])


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


QUICKSTART_SH = "bash scripts/quickstart.sh"
QUICKSTART_SCRIPT = "python examples/quickstart/run_quickstart.py"


def interpreter_for(command: str) -> str:
    """`.venv/bin/python` and a leading `python` mean this interpreter; `bash scripts/quickstart.sh` its script."""
    if command.startswith(QUICKSTART_SH):
        command = QUICKSTART_SCRIPT + command[len(QUICKSTART_SH) :]
    command = command.replace(".venv/bin/python", sys.executable)
    return re.sub(r"(^|(?<=\s))python(?=\s)", sys.executable, command, count=1)


def test_quickstart_sh_runs_the_quickstart_script():
    """The substitution above holds: after its set-up step, scripts/quickstart.sh runs the quickstart script with
    every argument it was given, from the repository root."""
    lines = [line for line in (REPO / "scripts" / "quickstart.sh").read_text().splitlines() if line.strip()]
    assert 'cd "$ROOT"' in lines and any(line.startswith("bash scripts/setup.sh --core") for line in lines)
    assert lines[-1] == 'exec "$VENV/bin/python" examples/quickstart/run_quickstart.py "$@"'
    assert (
        interpreter_for(QUICKSTART_SH + " --out x a=1")
        == f"{sys.executable} examples/quickstart/run_quickstart.py --out x a=1"
    )


# Python commands (`python -m module ...`, `python script.py ...`, optionally after VAR=value assignments and with
# no other shell syntax) run in one warm interpreter: it imports the training stack once, then forks a fresh process
# per command that sets argv, the working directory and the environment and runs the module or script as __main__.
# Each command still runs in its own process with its own output; only the ~10 s of imports is shared, which keeps
# the page's dry-run checks cheap. Anything else runs with bash.
WARM_IMPORTS = ("skyrl_train.entrypoints.main_base",)
WARM_RUNNER = textwrap.dedent("""
    import importlib, json, os, runpy, sys
    for module in json.loads(sys.argv[2]):
        importlib.import_module(module)
    results = []
    for job in json.load(open(sys.argv[1])):
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                with open(job["out"], "w") as out, open(job["err"], "w") as err:
                    os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
                os.chdir(job["cwd"]); os.environ.update(job["env"])
                argv = job["argv"]
                if argv[0] == "-m":
                    sys.argv = [argv[1]] + argv[2:]; sys.path.insert(0, os.getcwd())
                    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
                else:
                    sys.argv = list(argv); sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
                    runpy.run_path(argv[0], run_name="__main__")
                code = 0
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                if not isinstance(exit_.code, (int, type(None))):
                    print(exit_.code, file=sys.stderr)
            except BaseException:
                import traceback; traceback.print_exc()
            finally:
                sys.stdout.flush(); sys.stderr.flush()
                os._exit(code)
        results.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print(json.dumps(results))
    """)


def python_form(command: str) -> tuple[dict[str, str], list[str]] | None:
    """(environment assignments, argv after the interpreter) when `command` is a plain python command, else None."""
    if re.search(r"[|&;<>$`~*(){}]", command):
        return None
    tokens = shlex.split(command)
    env = {}
    while tokens and re.fullmatch(r"[A-Za-z_]\w*=.*", tokens[0]):
        name, _, value = tokens.pop(0).partition("=")
        env[name] = value
    if len(tokens) < 2 or tokens[0] != sys.executable or (tokens[1] == "-m" and len(tokens) < 3):
        return None
    if tokens[1] != "-m" and not tokens[1].endswith(".py"):
        return None
    return env, tokens[1:]


def run_warm(jobs: list[tuple[list[str], dict[str, str], Path]], scratch: Path) -> list[tuple[int, str, str]]:
    """Run python commands (argv, env, cwd) through the warm runner; (exit code, stdout, stderr) for each."""
    specs = []
    for index, (argv, env, cwd) in enumerate(jobs):
        out, err = scratch / f"job{index}.out", scratch / f"job{index}.err"
        specs.append({"argv": argv, "env": env, "cwd": str(cwd), "out": str(out), "err": str(err)})
    (scratch / "jobs.json").write_text(json.dumps(specs))
    result = subprocess.run(
        [sys.executable, "-c", WARM_RUNNER, str(scratch / "jobs.json"), json.dumps(WARM_IMPORTS)],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S + 30 * len(jobs),
    )
    assert result.returncode == 0, f"the warm runner failed\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    codes = json.loads(result.stdout.strip().splitlines()[-1])
    return [(code, Path(spec["out"]).read_text(), Path(spec["err"]).read_text()) for code, spec in zip(codes, specs)]


def block_commands(block: Block) -> list[str]:
    """The commands the test runs for a shell block: interpreter substituted, the marker's arguments appended."""
    kind, argument = marker_kind(block)
    commands = [re.sub(r"\s\.\.\.(?=\s|$)", "", command) for command in command_lines(block.code)]
    return [interpreter_for(command) + (f" {argument}" if kind == "run-with" else "") for command in commands]


def link_repository(directory: Path) -> None:
    """Link the repository's top-level folders into a temporary working directory."""
    for name in ("scripts", "examples", "benchmarks", "skyrl-gym", "skyrl-train", "skyrl-agent", "skyrl-tx"):
        (directory / name).symlink_to(REPO / name)


@pytest.fixture(scope="module")
def warm_results(tmp_path_factory) -> dict[tuple[str, int], tuple[int, str, str]]:
    """The results of every python-form command of every runnable shell block, run in one warm interpreter and
    keyed by (block, command index); each block gets its own working directory."""
    jobs, keys = [], []
    for block in shell_blocks():
        if marker_kind(block)[0] == "skip":
            continue
        cwd = tmp_path_factory.mktemp("shell")
        link_repository(cwd)
        for index, command in enumerate(block_commands(block)):
            form = python_form(command)
            if form is not None:
                jobs.append((form[1], form[0], cwd))
                keys.append((block.where, index))
    if not jobs:
        return {}
    return dict(zip(keys, run_warm(jobs, tmp_path_factory.mktemp("warm"))))


def test_python_form_and_the_warm_runner(tmp_path):
    """Plain python commands are recognised; the warm runner gives each its own exit code, output, env and cwd."""
    python = sys.executable
    assert python_form(f"A=1 {python} -m pkg.mod x=1 'y=[\"a\"]'") == ({"A": "1"}, ["-m", "pkg.mod", "x=1", 'y=["a"]'])
    assert python_form(f"{python} run.py --out /tmp/x") == ({}, ["run.py", "--out", "/tmp/x"])
    assert python_form(f"{python} run.py > log") is None and python_form(f"{python} run.py ~/x") is None
    assert python_form("bash scripts/x.sh") is None
    script = tmp_path / "show.py"
    script.write_text(
        "import os, sys\nprint(sys.argv[1:], os.environ['GREETING'], os.getcwd())\nsys.exit(int(sys.argv[1]))\n"
    )
    results = run_warm(
        [
            (["-m", "skyrl_train.entrypoints.main_base", "--dry-run", "trainer.epochs=3"], {}, tmp_path),
            (["-m", "skyrl_train.entrypoints.main_base", "--dry-run", "trainer.epoch=3"], {}, tmp_path),
            ([str(script), "0"], {"GREETING": "hi"}, tmp_path),
            ([str(script), "3"], {"GREETING": "ho"}, REPO),
        ],
        tmp_path,
    )
    assert results[0][0] == 0 and "epochs: 3" in results[0][1]
    assert results[1][0] != 0 and "trainer.epochs" in results[1][2]  # the typo is refused with a suggestion
    assert results[2] == (0, f"['0'] hi {tmp_path}\n", "")
    assert results[3][:2] == (3, f"['3'] ho {REPO}\n")


@pytest.mark.parametrize("block", shell_blocks(), ids=lambda block: block.where)
def test_shell_block(block, tmp_path, request):
    """Run the block's commands (as written or with the marker's arguments) and compare what they print with the
    block's `output` block, or check it is marked skip."""
    kind, argument = marker_kind(block)
    if kind == "skip":
        pytest.skip(f"{block.where}: {argument}")
    if kind == "":
        plain = [
            command for command in command_lines(block.code) if "--dry-run" not in command and "--help" not in command
        ]
        assert not plain, (
            f"{block.where}: shell commands {plain} have no marker; add <!-- snippet: run -->, "
            "<!-- snippet: run-with ARGS --> or <!-- snippet: skip (reason) --> above the fence"
        )
    warm = request.getfixturevalue("warm_results")
    link_repository(tmp_path)
    printed = ""
    for index, full in enumerate(block_commands(block)):
        if (block.where, index) in warm:
            code, stdout, stderr = warm[(block.where, index)]
        else:
            result = subprocess.run(
                ["bash", "-c", full], cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=TIMEOUT_S
            )
            code, stdout, stderr = result.returncode, result.stdout, result.stderr
        assert code == 0, f"{block.where}: `{full}` failed with exit code {code}\n{stdout[-3000:]}\n{stderr[-3000:]}"
        printed += stdout
    shown = page_outputs()[block.page].get(block.where)
    if shown is not None:
        check_output(block, shown, printed)
