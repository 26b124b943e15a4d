"""Installs that cannot pick up a stranger's package: every documented install line installs this repository's packages.

PyPI's `skyrl-gym`, `skyrl-train` and `skyrl-tx` are other projects (upstream SkyRL's), and there is no `skyrl-agent`
there. So the packages pin each other to their own local version (`skyrl-train==0.1.0+repo`): PyPI refuses uploads
with a local version label, so no index can ever satisfy such a pin, and an install that leaves out a package it
needs fails naming it instead of quietly taking PyPI's. The fast tests here check the pins and that every documented
install line names the packages by path (`./skyrl-gym`, `-e skyrl-tx`), never by name.

The slow test (`bash scripts/test_installs.sh`, which `.ci/run` runs after the main suite) runs every documented
install line in a fresh venv against the real index and reads each installed package's `direct_url.json`: it must
point into this checkout. The venv is shared by the lines: between two lines our packages are uninstalled (their
third-party requirements stay, which changes nothing about where pip looks for ours).
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from skyrl_gym.sandbox.processes import kill_group

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("skyrl-gym", "skyrl-train", "skyrl-agent", "skyrl-tx")
MODULES = {name: name.replace("-", "_") for name in PACKAGES}
INSTALL = re.compile(r"\bpip3? install\b|scripts/(setup|setup_vllm|quickstart|test)\.sh\b")
FENCE = re.compile(r"^```([\w-]*)\s*$")
SHELL = ("bash", "sh", "console")
CHECKED_ELSEWHERE = {
    # set-up scripts the slow test does not run, and what checks what they install instead
    (
        "setup.sh",
        "",
    ): "the main suite's own venv (CI makes it fresh): test_the_packages_under_test_come_from_this_checkout",
    ("test.sh", ""): "runs setup.sh (above) first",
    ("setup_vllm.sh", ""): "one pip line naming every package by path: test_scripts_install_by_path",
    ("setup.sh", "--gpu"): "CUDA builds: resolved with --dry-run by tests/test_gpu_setup.py",
}
EXPECTED_FAILURES = {
    # lines the pages show failing on purpose, and what pip's error must name
    "pip install -e skyrl-tx": "No matching distribution found for skyrl-train==0.1.0+repo",
}
GPU_ONLY = re.compile(r"\b(vllm|sglang|megatron|flash-attn)\b")
OWNED_ELSEWHERE = {
    # pages another piece of work is rewriting; their install lines are reported there instead of failing here
    "docs/gpu.md": "issue 44 rewrites docs/gpu.md; its `pip install 'skyrl-train[...]'` lines must become paths",
}


def version_of(package: str) -> str:
    return tomllib.loads((REPO / package / "pyproject.toml").read_text())["project"]["version"]


def our_requirements(package: str) -> dict[str, str]:
    """The package's requirements on the repository's other packages: name -> the requirement string."""
    project = tomllib.loads((REPO / package / "pyproject.toml").read_text())["project"]
    found = {}
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        if name in PACKAGES:
            found[name] = requirement
    return found


def with_requirements(names: set[str]) -> set[str]:
    """`names` and every repository package they need, transitively."""
    closure, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            todo += list(our_requirements(name))
    return closure


def documented_pages() -> list[Path]:
    pages = [REPO / "README.md", REPO / "CLAUDE.md", *sorted((REPO / "docs").rglob("*.md"))]
    pages += sorted((REPO / "examples").glob("*/README.md")) + [REPO / package / "README.md" for package in PACKAGES]
    return [page for page in pages if page.exists()]


def commands_in(text: str) -> list[str]:
    """The install commands of a page: shell-block lines (continuations joined, comments dropped) and inline code
    (a span may wrap onto the next line of its paragraph)."""
    found, in_shell, in_fence, current, paragraph = [], False, False, "", []

    def spans() -> list[str]:
        text = " ".join(line.strip() for line in paragraph)
        paragraph.clear()
        return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", text) if INSTALL.search(span)]

    for raw in text.splitlines():
        fence = FENCE.match(raw.strip())
        if fence or not raw.strip():
            found += spans()
        if fence:
            in_fence = not in_fence
            in_shell = in_fence and fence.group(1) in SHELL
            continue
        if in_shell:
            line = raw.strip().removeprefix("$ ")
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            line = " ".join(re.sub(r"\s+#.*$", "", current + line).split())
            current = ""
            if INSTALL.search(line) and not line.startswith("#"):
                found.append(line)
        elif not in_fence:
            paragraph.append(raw)
    return found + spans()


def documented_install_lines() -> dict[str, list[str]]:
    """Every documented install command -> the pages (page:line) that show it."""
    lines: dict[str, list[str]] = {}
    for page in documented_pages():
        for command in commands_in(page.read_text()):
            lines.setdefault(command, []).append(str(page.relative_to(REPO)))
    return lines


def named_packages(command: str) -> tuple[set[str], list[str]]:
    """(our packages the pip command installs by path, the arguments naming one of ours by name instead)."""
    by_path, by_name = set(), []
    pip = re.search(r"(?:\bpip3?|\$\{PIP\[@\]\}\"?) install\b(.*)", command)
    if pip is None:
        return by_path, by_name
    tokens = shlex.split(pip.group(1))
    for index, token in enumerate(tokens):
        match = re.fullmatch(r"(\./)?(skyrl-(?:gym|train|agent|tx))/?(\[[\w,-]+\])?(\S*)", token)
        if match is None:
            continue
        editable = index > 0 and tokens[index - 1] in ("-e", "--editable")
        if match.group(1) or editable:
            by_path.add(match.group(2))
        else:
            by_name.append(token)
    return by_path, by_name


def classify(line: str) -> tuple[str, str, set[str]]:
    """How the suite checks a documented line: ("run", command, packages it must install), ("elsewhere", reason,
    set()) or ("not ours", "", set()) for lines that install none of our packages."""
    script = re.match(r"(?:bash\s+)?scripts/(\w+\.sh)\b\s*(.*)", line)
    if script:
        name, arguments = script.group(1), script.group(2)
        if name == "quickstart.sh" or (name == "setup.sh" and arguments == "--core"):
            return "run", "bash scripts/setup.sh --core", {"skyrl-gym", "skyrl-train"}  # quickstart.sh's first step
        flag = "--gpu" if arguments.startswith("--gpu") else ""
        key = (name, flag if name == "setup.sh" else "")
        if key in CHECKED_ELSEWHERE:
            return "elsewhere", CHECKED_ELSEWHERE[key], set()
        raise ValueError(f"documented line `{line}`: no rule says how scripts/{name} {arguments} is checked")
    by_path, _ = named_packages(line)
    if not by_path:
        return "not ours", "", set()
    if GPU_ONLY.search(line):
        return (
            "elsewhere",
            "names a CUDA-only extra or package: resolved with --dry-run by tests/test_gpu_setup.py",
            set(),
        )
    return "run", line, with_requirements(by_path)


def run_plan() -> list[tuple[str, str, set[str]]]:
    """The lines the slow test runs: (documented line, command run, repository packages it must install), one per
    distinct command."""
    plan, seen = [], set()
    for line in sorted(documented_install_lines()):
        kind, command, packages = classify(line)
        if kind == "run" and command not in seen:
            seen.add(command)
            plan.append((line, command, packages))
    return plan


# -- fast checks (main suite) ----------------------------------------------------------------------------------


def test_packages_pin_each_other_to_a_version_no_index_can_serve():
    """Each repository requirement pins the exact version of that package here, with a local label (PyPI refuses
    uploads of local versions); `__version__` agrees with the package metadata."""
    for package in PACKAGES:
        version = version_of(package)
        assert "+" in version, f"{package}/pyproject.toml: version {version!r} needs a local label such as +repo"
        init = (REPO / package / MODULES[package] / "__init__.py").read_text()
        assert f'__version__ = "{version}"' in init, f"{MODULES[package]}.__version__ must be {version!r}"
        for name, requirement in our_requirements(package).items():
            assert requirement == f"{name}=={version_of(name)}", (
                f"{package}/pyproject.toml requires {requirement!r}: pin {name}=={version_of(name)} so PyPI's "
                f"{name} (another project) can never satisfy it"
            )
    assert our_requirements("skyrl-tx") and our_requirements("skyrl-agent") and our_requirements("skyrl-train")


def test_every_documented_install_line_names_our_packages_by_path():
    """`pip install skyrl-train[...]` would fetch PyPI's skyrl-train; the pages say `./skyrl-train` or `-e skyrl-train`."""
    lines = documented_install_lines()
    wrong = {
        line: pages
        for line, pages in lines.items()
        if named_packages(line)[1] and not set(pages) <= set(OWNED_ELSEWHERE)
    }
    assert (
        not wrong
    ), "install lines naming a repository package by name (PyPI has other projects of those names):\n" + (
        "\n".join(f"  {line}    ({', '.join(pages)})" for line, pages in wrong.items())
    )


def test_every_documented_install_line_is_run_or_checked_elsewhere():
    """Each install line of ours (a set-up script, or pip naming one of our packages) runs in the slow test or has a
    rule saying what checks it instead; the lines the slow test runs cover every package."""
    for line in documented_install_lines():
        classify(line)  # raises for a script nobody checks
    runs = {command for _, command, _ in run_plan()}
    assert "bash scripts/setup.sh --core" in runs
    covered = set().union(*(packages for _, _, packages in run_plan()))
    assert covered == set(PACKAGES), f"no documented line installs {set(PACKAGES) - covered}"
    with pytest.raises(ValueError, match="no rule says"):
        classify("bash scripts/setup_gpu.sh")


def test_messages_and_docstrings_name_our_packages_by_path():
    """Install hints in the code (error messages, skip reasons, docstrings) follow the same rule as the pages."""
    wrong = []
    for folder in (*PACKAGES, "examples", "benchmarks", "scripts", "tests"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if ".venv" in path.parts or path == Path(__file__).resolve():
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for tail in re.findall(r"pip install ([^`#]*)", line):
                    for editable, dot, _name in re.findall(
                        r"(-e\s+)?[\"']?(\./)?\b(skyrl-(?:gym|train|agent|tx))\b", tail
                    ):
                        if not editable and not dot:
                            wrong.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not wrong, "install hints naming a repository package by name:\n" + "\n".join(wrong)


def test_line_parsing_on_examples():
    assert named_packages("pip install -e skyrl-gym -e ./skyrl-train 'skyrl-tx[postgres]'") == (
        {"skyrl-gym", "skyrl-train"},
        ["skyrl-tx[postgres]"],
    )
    assert named_packages('pip install "./skyrl-gym[all]" wandb') == ({"skyrl-gym"}, [])
    text = "Run `pip install ./skyrl-gym` first.\n```bash\npip install -e skyrl-gym \\\n  -e skyrl-train  # core\n```\n"
    assert commands_in(text) == ["pip install ./skyrl-gym", "pip install -e skyrl-gym -e skyrl-train"]
    assert commands_in("Extras: `pip install -e skyrl-gym -e\n./skyrl-train[wandb]`.\n") == [
        "pip install -e skyrl-gym -e ./skyrl-train[wandb]"
    ]
    assert with_requirements({"skyrl-tx"}) == {"skyrl-tx", "skyrl-train", "skyrl-gym"}


def test_scripts_install_by_path():
    """The set-up scripts' own pip lines name the packages by path too."""
    for script in ("setup.sh", "setup_vllm.sh"):
        text = (REPO / "scripts" / script).read_text().replace("\\\n", " ")
        lines = [line for line in text.splitlines() if re.search(r"\binstall\b", line) and "skyrl-" in line]
        wrong = [token for line in lines for token in named_packages(line.split(" 2>")[0])[1]]
        assert not wrong, f"scripts/{script} installs {wrong} by name: PyPI's packages of those names are others'"
        assert any(named_packages(line.split(" 2>")[0])[0] for line in lines), f"no pip line found in {script}"


def test_the_packages_under_test_come_from_this_checkout():
    """The venv running this suite (made by `bash scripts/setup.sh`, freshly in CI) holds this checkout's packages,
    installed from their folders here, not PyPI's."""
    from importlib import metadata

    for name in PACKAGES:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # `--core` venvs lack skyrl-agent and skyrl-tx
        assert distribution.version == version_of(name)
        source = json.loads(distribution.read_text("direct_url.json") or "null")
        assert source is not None, f"{name} {distribution.version} came from an index, not from this repository"
        assert source["url"] == (REPO / name).as_uri(), f"{name} was installed from {source['url']}, not {REPO / name}"


# -- the slow test: every line in a fresh venv ----------------------------------------------------------------

RUN_INSTALLS = os.environ.get("SKYRL_RUN_INSTALL_TESTS") == "1"
installs = pytest.mark.skipif(
    not RUN_INSTALLS, reason="installs into a fresh venv (minutes): bash scripts/test_installs.sh, run by .ci/run"
)

# How long one install command may take. On an idle machine the slowest line (setup.sh --core) took 36 s and the shared
# venv's torch install 24 s; at nice 19 beside the main suite, which keeps both cores busy (where .ci/run ran them until
# 2026-12-02), the same two took more than 650 s and 547 s. A hang guard that holds on a busy machine, not a goal.
COMMAND_LIMIT_S = 2400


def run_in_own_group(command: list[str], *, cwd: Path, env: dict[str, str] | None) -> subprocess.CompletedProcess:
    """Run a command in its own process group and kill the whole group if it outlives COMMAND_LIMIT_S or the test
    stops early (a timeout, Ctrl-C): a pip that a killed `bash -c` left running would go on installing into the shared
    venv while the next line is checked."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=COMMAND_LIMIT_S)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        stdout, stderr = process.communicate()
        pytest.fail(f"`{shlex.join(command)}` ran longer than {COMMAND_LIMIT_S} s:\n{stdout[-2000:]}\n{stderr[-2000:]}")
    except BaseException:
        kill_group(process.pid)
        raise
    kill_group(process.pid)  # anything the command started in the background and left behind
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


PROBE = """
import json, sys
from importlib import metadata
found = {}
for name in sys.argv[1:]:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    found[name] = {"version": dist.version, "direct_url": json.loads(dist.read_text("direct_url.json") or "null")}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of this checkout's files (tracked and untracked, not ignored): lines install from it, not from here,
    so builds never write into the tree the main suite is running from."""
    copy = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout
    for relative in filter(None, listed.decode().split("\0")):
        source = REPO / relative
        if source.is_file():
            (copy / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / relative)
    return copy


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with torch==2.13.0 (CPU) installed first, as the pages say."""
    path = tmp_path_factory.mktemp("installs") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(path)], check=True)
    pip = [str(path / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    for step in (["install", "--upgrade", "pip"], ["install", "torch==2.13.0"]):
        result = run_in_own_group([*pip, *step], cwd=REPO, env=None)
        assert result.returncode == 0, f"`pip {' '.join(step)}` failed:\n{result.stderr[-3000:]}"
    return path


def installed(venv: Path) -> dict[str, dict]:
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", PROBE, *PACKAGES], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


@installs
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(COMMAND_LIMIT_S + 600, func_only=True)  # backstop: the commands have their own limits
@pytest.mark.parametrize("documented, command, expected", run_plan(), ids=[line for line, _, _ in run_plan()])
def test_documented_install_line_installs_this_repository(documented, command, expected, venv, checkout):
    """Run the line in the shared venv after removing our packages; every one of ours it installed must have come
    from the checkout's folder of that package, and it must have installed what it needs."""
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", *PACKAGES], check=True, capture_output=True)
    assert installed(venv) == {}
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", SKYRL_VENV=str(venv))
    env["VIRTUAL_ENV"] = str(venv)
    result = run_in_own_group(["bash", "-c", command], cwd=checkout, env=env)
    if command in EXPECTED_FAILURES:
        assert result.returncode != 0 and EXPECTED_FAILURES[command] in result.stderr, result.stderr[-3000:]
        assert installed(venv) == {}, "a failed line must leave nothing of ours behind"
        return
    assert result.returncode == 0, f"`{command}` failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    found = installed(venv)
    assert set(found) == expected, f"`{command}` installed {sorted(found)}, expected {sorted(expected)}"
    for name, info in found.items():
        source = info["direct_url"]
        assert source is not None, f"`{command}`: {name} {info['version']} came from an index, not this repository"
        assert source["url"] == (checkout / name).as_uri(), f"`{command}`: {name} came from {source['url']}"
        assert info["version"] == version_of(name)
    modules = [MODULES[name] for name in sorted(found)]
    subprocess.run([python, "-c", f"import {', '.join(modules)}"], check=True, cwd="/")


def test_a_command_past_its_limit_leaves_nothing_running(tmp_path, monkeypatch):
    """A line that runs too long fails with its limit named, and what it started in the background dies with it (in
    CI a timed-out `bash -c` once left pip installing into the shared venv during the next line's check)."""
    monkeypatch.setattr(sys.modules[__name__], "COMMAND_LIMIT_S", 1)
    marker = tmp_path / "still-running"
    with pytest.raises(pytest.fail.Exception, match="ran longer than 1 s"):
        run_in_own_group(["bash", "-c", f"(sleep 3; touch {marker}) & sleep 30"], cwd=tmp_path, env=None)
    subprocess.run(["sleep", "4"], check=True)
    assert not marker.exists(), "the background job outlived its command's limit"
