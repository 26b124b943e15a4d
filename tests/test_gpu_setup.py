"""`scripts/setup.sh --gpu vllm|sglang` and docs/gpu-setup.md: the GPU stacks resolve, and the page is checked.

No GPU runs here, so the GPU install itself cannot. What can: pip's resolver over each stack's exact requirements
(`--dry-run`, reading wheel metadata by HTTP range requests, nothing installed), so a version conflict between the
pinned torch / vLLM / SGLang / megatron-core and our packages' own requirements fails here, not on a user's cluster.
That slow part runs in `bash scripts/test_installs.sh` (after the main suite in `.ci/run`); its pip sees only the
package index, as on a GPU user's machine (this machine's pip config adds a local CPU torch wheel, which would hide
the CUDA build's requirements). The fast part checks the script's refusals and that every command on the page is run
by the snippet test or resolved here.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from skyrl_gym.sandbox.processes import kill_group

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup.sh"
PAGE = REPO / "docs" / "gpu-setup.md"
GPU_LINE = re.compile(r"^(?:[A-Z_]+=\S+\s+)*bash scripts/setup\.sh --gpu (\w+)$")
MAX_DOWNLOAD_MB = 20.0  # a wheel this large downloaded means pip is fetching whole wheels, not their metadata


def pins(stack: str) -> dict[str, str]:
    """The versions setup.sh pins for a stack: torch, the engine, megatron-core."""
    text = SETUP.read_text()
    branch = re.search(r'if \[ "\$STACK" = "vllm" \]; then(.*?)else(.*?)fi', text, re.DOTALL)
    body = branch.group(1) if stack == "vllm" else branch.group(2)
    found = {"torch": re.search(r'TORCH_VERSION="([\d.]+)"', body).group(1)}
    engine = re.search(r'ENGINE="(\w+)==([\w.]+)"', body)
    found[engine.group(1)] = engine.group(2)
    found["megatron-core"] = re.search(r'MEGATRON="megatron-core==([\d.]+)"', text).group(1)
    return found


def page_blocks() -> list[tuple[str | None, list[str]]]:
    """(snippet marker or None, commands) for each shell block of the page, via the snippet test's parser."""
    sys.path.insert(0, str(REPO / "tests"))
    try:
        import test_doc_snippets as snippets
    finally:
        sys.path.pop(0)
    blocks = [block for block in snippets.parse_blocks(PAGE) if block.lang in snippets.SHELL_LANGUAGES]
    return [(block.marker, snippets.command_lines(block.code)) for block in blocks]


def page_stacks() -> list[str]:
    """The stacks the page installs with `bash scripts/setup.sh --gpu STACK`."""
    stacks = []
    for _, commands in page_blocks():
        for command in commands:
            match = GPU_LINE.match(command)
            if match and match.group(1) not in stacks:
                stacks.append(match.group(1))
    return stacks


def run_setup(*arguments: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SETUP), *arguments],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SKYRL_VENV": str(tmp_path / "venv"), **env},
        timeout=60,
    )


def test_gpu_options_are_checked_before_anything_installs(tmp_path):
    """A missing stack, --dry-run without --gpu, and --gpu on a machine without an NVIDIA driver are refused with
    what to do instead, before a venv exists."""
    result = run_setup("--gpu", env={}, tmp_path=tmp_path)
    assert result.returncode == 2 and "--gpu needs a stack, 'vllm' or 'sglang'" in result.stderr
    result = run_setup("--gpu", "tensorrt", env={}, tmp_path=tmp_path)
    assert result.returncode == 2 and "(got 'tensorrt')" in result.stderr
    result = run_setup("--dry-run", env={}, tmp_path=tmp_path)
    assert result.returncode == 2 and "--dry-run goes with --gpu" in result.stderr
    assert not Path("/usr/bin/nvidia-smi").exists() and not Path("/bin/nvidia-smi").exists()
    result = run_setup("--gpu", "vllm", env={}, tmp_path=tmp_path)
    assert result.returncode == 1 and "no NVIDIA driver" in result.stderr and "--gpu vllm --dry-run" in result.stderr
    assert not (tmp_path / "venv").exists()


def test_the_page_states_the_pins_the_script_installs():
    """docs/gpu-setup.md names every version setup.sh pins for the stacks it installs."""
    text = PAGE.read_text()
    assert page_stacks() == ["vllm", "sglang"]
    for stack in page_stacks():
        for name, version in pins(stack).items():
            assert (
                f"{name} {version}" in text or f"{name}=={version}" in text
            ), f"{PAGE.name} does not say {name} {version}"


def test_every_command_on_the_page_is_run_or_resolved():
    """Each shell command of the page either runs in the snippet test (as written or with --dry-run) or is a
    `setup.sh --gpu STACK` line, which test_gpu_stack_resolves resolves; nothing is merely skipped."""
    unchecked = []
    for marker, commands in page_blocks():
        for command in commands:
            if GPU_LINE.match(command):
                continue
            runs = marker is not None and (marker == "run" or marker.startswith("run-with"))
            dry = marker is None and ("--dry-run" in command or "--help" in command)
            if not (runs or dry):
                unchecked.append(f"{command}  (marker: {marker})")
    assert not unchecked, "commands on docs/gpu-setup.md that nothing runs:\n" + "\n".join(unchecked)


RUN_INSTALLS = os.environ.get("SKYRL_RUN_INSTALL_TESTS") == "1"


@pytest.mark.skipif(
    not RUN_INSTALLS, reason="resolves GPU stacks against the package index: bash scripts/test_installs.sh (.ci/run)"
)
@pytest.mark.integration
@pytest.mark.slow
# on an idle machine the slower stack (sglang) resolved in 78 s; at nice 19 beside the main suite, up to 195 s
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("stack", page_stacks())
def test_gpu_stack_resolves(stack, tmp_path):
    """`bash scripts/setup.sh --gpu STACK --dry-run` resolves with pip's resolver to the pinned versions and our
    packages from this checkout, reading metadata only: a whole-wheel download stops the test at once."""
    report = tmp_path / "report.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, SKYRL_DRY_RUN_REPORT=str(report), PIP_DISABLE_PIP_VERSION_CHECK="1")
    if "PIP_CERT" in os.environ:
        env["PIP_CERT"] = os.environ["PIP_CERT"]
    process = subprocess.Popen(
        ["bash", str(SETUP), "--gpu", stack, "--dry-run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    output, too_large = [], None
    try:
        for line in process.stdout:
            output.append(line)
            size = re.search(r"Downloading \S+ \(([\d.]+) (kB|MB|GB)\)", line)
            if size and float(size.group(1)) * {"kB": 1e-3, "MB": 1.0, "GB": 1e3}[size.group(2)] > MAX_DOWNLOAD_MB:
                too_large = line.strip()
                kill_group(process.pid)
                break
    except BaseException:  # the test's time limit, Ctrl-C: leave no resolver running
        kill_group(process.pid)
        raise
    process.wait(timeout=60)
    assert too_large is None, f"pip downloaded a whole wheel instead of its metadata: {too_large}"
    assert process.returncode == 0, f"the {stack} stack does not resolve:\n{''.join(output[-60:])}"
    picked = {item["metadata"]["name"].lower(): item for item in json.loads(report.read_text())["install"]}
    for name, version in pins(stack).items():
        assert picked[name]["metadata"]["version"] == version, f"{name}: {picked[name]['metadata']['version']}"
    for name in ("skyrl-gym", "skyrl-train", "skyrl-agent", "skyrl-tx"):
        assert picked[name]["download_info"]["url"] == (REPO / name).as_uri(), picked[name]["download_info"]
    transformers = tuple(int(part) for part in picked["transformers"]["metadata"]["version"].split(".")[:2])
    assert (5, 0) <= transformers < (5, 20), "skyrl-train's transformers range must hold"
    print("".join(line for line in output if line.startswith("[setup]")))
