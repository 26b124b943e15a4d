"""Counts how many of upstream SkyRL's example run scripts pass this project's `--dry-run` unchanged.

    python scripts/count_upstream_scripts.py /path/to/SkyRL                # both layouts, summary + the failures
    python scripts/count_upstream_scripts.py /path/to/SkyRL --in-process   # same count, one interpreter (faster)
    python scripts/count_upstream_scripts.py /path/to/SkyRL --assume-key trainer.remove_microbatch_padding

The first argument is a clone (or bare mirror) of NovaSky-AI/SkyRL; nothing of it is stored here. For each layout
the script exports the example tree at its revision into a temporary directory and runs every run script with
bash, as a user would, with `HOME` pointing at an empty directory (so every data path is a fresh one), variables a
script demands (`${NAME:?...}`) set to placeholder paths, and `uv`, `python` and `python3` replaced by stubs that
record the module and arguments of each `-m <module>` call instead of running it. Each recorded training call is
then run from this repo's root as `python -m <module> <args> --dry-run`, with the module path exactly as the script
wrote it and the variables of the files the script hands `uv run --env-file` (as uv would set them). A script passes when all its calls exit 0; a failing one counts as "refused by name" when every problem
its message lists says "not supported here" (the phrase with which this project refuses a feature by name, `yet` or
not; validation words every such refusal that way). The summary ends with what blocks the others:
per feature, the scripts it blocks and those it alone blocks. `--assume-key` leaves a key's overrides out of the
replay, to count as if a key another branch adds were there.

Which scripts count:
- current (`examples/train`, upstream HEAD): the scripts whose own text calls `skyrl.train.entrypoints.main_base`;
- legacy (`skyrl-train/examples` at the last commit that had it): every script that starts a training run through
  any module (wrappers included), leaving out data preparation, servers and SFT.
"""

import argparse
import contextlib
import datetime
import io
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import tarfile
import tempfile
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Layout:
    """Where one of upstream's layouts keeps its scripts and which calls of them count."""

    name: str
    revision: str
    examples_dir: str
    run_from: str
    """Directory (inside the exported tree) the scripts are run from, as upstream's README says."""
    ours_run_from: str
    """Directory (inside this repo) the recorded calls are replayed from."""
    counted_modules: tuple[str, ...] | None
    """Only scripts calling one of these modules directly count; None: every training call counts."""


LAYOUTS = {
    "legacy": Layout("legacy", "27380cb7c", "skyrl-train/examples", "skyrl-train", ".", None),
    "current": Layout("current", "HEAD", "examples/train", ".", ".", ("skyrl.train.entrypoints.main_base",)),
}

NOT_TRAINING = ("data_preprocess", "dataset", "vllm_server", "main_sft", "serve", "retrieval", "tinker", "prepare")
"""Substrings of module names whose calls prepare data or start servers: not training runs."""

_STUB = """#!/usr/bin/env bash
# records `-m <module> args...` calls (one JSON line each, with the files of `uv run --env-file`) instead of running them
env_files=()
for ((i = 1; i <= $#; i++)); do
  if [ "${!i}" = "--env-file" ]; then
    j=$((i + 1))
    env_files+=("$(realpath -m -- "${!j}")")
  elif [[ "${!i}" == --env-file=* ]]; then
    env_files+=("$(realpath -m -- "${!i#--env-file=}")")
  elif [ "${!i}" = "-m" ]; then
    "$STUB_PYTHON" -c 'import json, sys; n = int(sys.argv[1]); print(json.dumps({"env_files": sys.argv[2:2 + n], "argv": sys.argv[2 + n:]}))' \
      "${#env_files[@]}" "${env_files[@]}" "${@:i+1}" >> "$STUB_RECORD"
    exit 0
  fi
done
exit 0
"""


def read_env_file(path: Path) -> dict[str, str]:
    """The variables of a dotenv file as `uv run --env-file` sets them: `KEY=VALUE` lines, `#` comments (also after an
    unquoted value), optional quotes and `export`; a missing file gives none."""
    variables: dict[str, str] = {}
    if not path.is_file():
        return variables
    for line in path.read_text().splitlines():
        line = line.strip().removeprefix("export ").strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if value[:1] in ("'", '"') and value[:1] in value[1:]:
            value = value[1 : value.index(value[0], 1)]
        else:
            value = value.split(" #", 1)[0].strip()
        variables[key] = value
    return variables


@dataclass
class Call:
    """One recorded `-m module args` call of a script and what our `--dry-run` said about it."""

    module: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Variables the script's launcher sets for the call (`uv run --env-file`)."""
    exit_code: int | None = None
    message: str = ""


@dataclass
class ScriptResult:
    """A script, its training calls, and whether all of them passed."""

    path: str
    calls: list[Call] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.calls) and all(call.exit_code == 0 for call in self.calls)

    @property
    def refused_by_name(self) -> bool:
        return not self.passed and all(call.exit_code == 0 or _refused_by_name(call.message) for call in self.calls)


NAMED_REFUSAL = "not supported here"
"""The phrase with which this project refuses a feature by name (anything else is a plain config error)."""


def problems_of(message: str) -> list[str]:
    """The problems of a `config error:` message: its bullet lines, or its one line."""
    text = message.split("config error:", 1)[-1]
    bullets = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ")]
    return bullets or [text.strip().splitlines()[0] if text.strip() else message]


def feature_of(problem: str) -> str:
    """The feature a named refusal names: the refused key for `key=value is not supported here yet` (roles merged),
    else the words before "not supported here" (the problem itself, shortened, when it names none)."""
    head = re.split(r" (?:is|are) not supported here", problem, maxsplit=1)[0]
    if re.fullmatch(r"[\w.]+=\S+", head) and " is not supported here yet" in problem:
        key = re.sub(r"trainer\.(policy|ref|critic)\.", "trainer.<role>.", head.split("=", 1)[0])
        return re.sub(r"\.lora\.\w+$", ".lora", key) + " (not supported yet)"
    if head.count("(") > head.count(")"):  # the refusal is a parenthetical: the feature is what it says
        head = head.rsplit("(", 1)[1]
    elif re.match(r"'?[+~]?[\w.]+=\S*?'?: ", head):  # `key=value: feature ...`
        head = head.split(": ", 1)[1]
    else:
        for marker in (" needs ", " is "):
            if marker in head:
                head = head.split(marker, 1)[1]
                break
    return head.split(", which", 1)[0].rstrip(", ")[:120]


def blockers(results: list[ScriptResult]) -> list[tuple[str, int, int]]:
    """(feature, scripts it blocks, scripts it alone blocks) for the scripts refused by name, most blocking first."""
    blocking: dict[str, int] = {}
    alone: dict[str, int] = {}
    for result in results:
        if result.passed:
            continue
        features = {feature_of(p) for call in result.calls if call.exit_code for p in problems_of(call.message)}
        for feature in features:
            blocking[feature] = blocking.get(feature, 0) + 1
        if len(features) == 1:
            alone[next(iter(features))] = alone.get(next(iter(features)), 0) + 1
    return sorted(((f, n, alone.get(f, 0)) for f, n in blocking.items()), key=lambda item: (-item[2], -item[1]))


def _refused_by_name(message: str) -> bool:
    return all(NAMED_REFUSAL in problem for problem in problems_of(message))


def export_tree(upstream: Path, revision: str, subdir: str, target: Path) -> None:
    """Write `subdir` of `upstream` at `revision` into `target` (works for clones and bare mirrors)."""
    archive = target / "tree.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(upstream), "archive", revision, subdir], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
    archive.unlink()


def required_variables(script: Path) -> dict[str, str]:
    """Placeholder values for the variables a script demands (`${NAME:?message}`), e.g. a sync directory."""
    names = re.findall(r"\$\{(\w+):\?", script.read_text())
    return {name: f"/tmp/upstream-placeholder/{name.lower()}" for name in names}


def record_calls(script: Path, cwd: Path, home: Path, stubs: Path) -> list[Call]:
    """Run `script` with the stubs first on PATH and return the `-m` calls it made."""
    record = home / "calls.jsonl"
    record.unlink(missing_ok=True)
    env = {
        **required_variables(script),
        "PATH": f"{stubs}:{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "STUB_RECORD": str(record),
        "STUB_PYTHON": sys.executable,
    }
    subprocess.run(
        ["bash", str(script)], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60
    )
    if not record.exists():
        return []
    calls = []
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        env = {key: value for name in entry["env_files"] for key, value in read_env_file(Path(name)).items()}
        if entry["argv"]:
            calls.append(Call(module=entry["argv"][0], args=entry["argv"][1:], env=env))
    return calls


def is_training(module: str) -> bool:
    """True unless the module prepares data, starts a server or runs SFT."""
    return not any(part in module for part in NOT_TRAINING)


def dry_run(call: Call, cwd: Path, home: Path) -> None:
    """Replay `call` here with `--dry-run` and store its exit code and message."""
    env = dict(os.environ, **call.env, HOME=str(home), PYTHONWARNINGS="ignore")
    proc = subprocess.run(
        [sys.executable, "-m", call.module, *call.args, "--dry-run"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    call.exit_code = proc.returncode
    call.message = proc.stderr.strip() if proc.returncode else ""


def dry_run_in_process(call: Call, cwd: Path, home: Path) -> None:
    """`dry_run` without a new interpreter per call (the module runs with `runpy`, as `python -m` runs it): the same
    module path, arguments and working directory, minus the start-up cost. For quick counts on a busy machine."""
    saved = (os.getcwd(), list(sys.argv), list(sys.path), os.environ.get("HOME"))
    saved_env = {key: os.environ.get(key) for key in call.env}
    out, err = io.StringIO(), io.StringIO()
    os.chdir(cwd)
    sys.path.insert(0, str(cwd))
    os.environ.update(call.env)
    os.environ["HOME"] = str(home)
    sys.argv = [call.module, *call.args, "--dry-run"]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                runpy.run_module(call.module, run_name="__main__", alter_sys=True)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:  # noqa: BLE001 - a crash is a failure to report, not to stop the count
                code = 1
                traceback.print_exc()
    finally:
        os.chdir(saved[0])
        sys.argv[:] = saved[1]
        sys.path[:] = saved[2]
        if saved[3] is not None:
            os.environ["HOME"] = saved[3]
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    call.exit_code = code
    call.message = err.getvalue().strip() if code else ""


def count_layout(
    upstream: Path,
    layout: Layout,
    jobs: int,
    replay: bool = True,
    in_process: bool = False,
    assume_keys: tuple[str, ...] = (),
) -> list[ScriptResult]:
    """Every counted script of `layout` with its calls replayed here."""
    with tempfile.TemporaryDirectory(prefix=f"upstream-{layout.name}-") as tmp:
        root = Path(tmp)
        export_tree(upstream, layout.revision, layout.examples_dir, root)
        home = root / "home"
        home.mkdir()
        stubs = root / "stubs"
        stubs.mkdir()
        for name in ("uv", "python", "python3"):
            stub = stubs / name
            stub.write_text(_STUB)
            stub.chmod(0o755)
        results = []
        for script in sorted((root / layout.examples_dir).rglob("*.sh")):
            calls = [c for c in record_calls(script, root / layout.run_from, home, stubs) if is_training(c.module)]
            if layout.counted_modules is not None:
                text = script.read_text()
                if not any(module in text for module in layout.counted_modules):
                    continue
                calls = [c for c in calls if c.module in layout.counted_modules]
            if calls:
                results.append(ScriptResult(str(script.relative_to(root / layout.examples_dir)), calls))
        ours = REPO_ROOT / layout.ours_run_from
        if not replay:
            return results
        calls = [c for r in results for c in r.calls]
        for call in calls:
            call.args = [arg for arg in call.args if arg.split("=", 1)[0].lstrip("+~") not in assume_keys]
        if in_process:
            for call in calls:
                dry_run_in_process(call, ours, home)
        else:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(lambda c: dry_run(c, ours, home), calls))
        shutil.rmtree(home, ignore_errors=True)
        return results


def main(argv: list[str] | None = None) -> int:
    """Count and print the results; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", type=Path, help="clone or bare mirror of NovaSky-AI/SkyRL")
    parser.add_argument("--layout", choices=[*LAYOUTS, "both"], default="both")
    parser.add_argument("--jobs", type=int, default=2, help="dry runs at once")
    parser.add_argument("--json", type=Path, help="also write every call and its result here")
    parser.add_argument("--in-process", action="store_true", help="replay every call in this process (faster)")
    parser.add_argument(
        "--assume-key",
        action="append",
        default=[],
        help="leave this key's overrides out of the replay (a key another branch adds); repeatable",
    )
    parser.add_argument("--no-replay", action="store_true", help="only record the calls (use with --json)")
    parser.add_argument("--list", action="store_true", help="print every script, not only the failing ones")
    parser.add_argument(
        "--summary",
        type=Path,
        help="also write the counts and blockers per layout here (benchmarks/results/upstream_scripts.json is "
        "rendered on docs/migrating-from-skyrl.md)",
    )
    args = parser.parse_args(argv)
    names = list(LAYOUTS) if args.layout == "both" else [args.layout]
    report = {}
    summary: dict[str, Any] = {"date": datetime.date.today().isoformat(), "layouts": {}}
    for name in names:
        results = count_layout(
            args.upstream, LAYOUTS[name], args.jobs, not args.no_replay, args.in_process, tuple(args.assume_key)
        )
        passed = [r for r in results if r.passed]
        refused = [r for r in results if r.refused_by_name]
        assumed = f", leaving out {', '.join(args.assume_key)}" if args.assume_key else ""
        commit = subprocess.run(
            ["git", "-C", str(args.upstream), "rev-parse", "--short", LAYOUTS[name].revision],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        print(
            f"{name} ({commit}{assumed}): {len(passed)} / {len(results)} pass --dry-run; {len(refused)} refused by name;"
            f" {len(results) - len(passed) - len(refused)} other failures"
        )
        for result in results:
            if result.passed and not args.list:
                continue
            status = "PASS" if result.passed else ("REFUSED" if result.refused_by_name else "FAIL")
            print(f"  {status:8} {result.path}")
            for call in result.calls:
                if call.exit_code:
                    problems = "\n        ".join(problem[:220] for problem in problems_of(call.message))
                    print(f"      [{call.module}] {problems}")
        print("  what blocks the others (scripts blocked / blocked by this alone):")
        for feature, count, only in blockers(results):
            print(f"    {count:3d} / {only:3d}  {feature}")
        report[name] = [asdict(r) | {"passed": r.passed, "refused_by_name": r.refused_by_name} for r in results]
        summary["layouts"][name] = {
            "commit": commit,
            "scripts": len(results),
            "passed": len(passed),
            "refused_by_name": len(refused),
            "other_failures": len(results) - len(passed) - len(refused),
            "blockers": [{"feature": f, "scripts": n, "alone": only} for f, n, only in blockers(results)],
            "not_passing": [r.path for r in results if not r.passed],
        }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.summary:
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
