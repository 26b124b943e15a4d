"""scripts/setup.sh's options: `--core` is the only one, and anything else is refused before it installs a thing."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_an_unknown_option_is_refused_naming_it_and_installs_nothing(tmp_path):
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup.sh"), "--minimal"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "SKYRL_VENV": str(venv)},
        timeout=60,
    )
    assert result.returncode == 2
    assert "unknown option '--minimal'" in result.stderr and "--core" in result.stderr
    assert not venv.exists()
