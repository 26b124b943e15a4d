"""The Ray quickstart, shortened to a few steps and run as `scripts/quickstart.sh` runs it: it must finish, write
the checkpoint, the HF export and the curves where it says, and end with the machine-readable accuracy line."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "run_quickstart.py"
LAST_LINE = re.compile(r"^quickstart: eval accuracy before=(\S+) after=(\S+)$")


@pytest.mark.integration
@pytest.mark.slow
def test_short_quickstart_writes_its_outputs_and_ends_with_the_accuracy_line(tmp_path):
    command = [
        sys.executable,
        str(SCRIPT),
        "--out",
        str(tmp_path),
        "--train-size",
        "256",
        "--test-size",
        "32",
        "trainer.max_training_steps=3",
        "trainer.eval_interval=0",
        "trainer.ckpt_interval=2",
        "trainer.logger=['console','jsonl']",
        "trainer.policy.optimizer.num_warmup_steps=0",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    match = LAST_LINE.match(lines[-1])
    assert match, lines[-5:]
    before, after = float(match.group(1)), float(match.group(2))
    assert 0.0 <= before <= 1.0 and 0.0 <= after <= 1.0 and not math.isnan(before + after)

    said = dict(line.strip().split(": ", 1) for line in lines if line.startswith("  ") and ": " in line)
    assert said["checkpoint"] == str(tmp_path / "ckpts" / "global_step_3")
    assert (tmp_path / "ckpts" / "global_step_3" / "COMPLETE").exists()
    assert (tmp_path / "ckpts" / "global_step_2" / "COMPLETE").exists()
    assert said["HF export"] == str(tmp_path / "exports" / "global_step_3" / "policy")
    assert (Path(said["HF export"]) / "model.safetensors").exists()
    assert said["curves"] == str(tmp_path / "exports" / "curves.png")
    assert Path(said["curves"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the learning-rate schedule decays over optimizer steps (2 per training step here): the last step's rate is
    # below the first's, and a cosine schedule never comes back up
    import json

    rows = [json.loads(line) for line in (tmp_path / "logs" / "jsonl" / "quickstart" / "grpo_addition.jsonl").open()]
    rates = [row["policy/lr"] for row in rows if "policy/lr" in row]
    assert len(rates) == 3 and rates == sorted(rates, reverse=True) and rates[-1] < rates[0]


def test_dry_run_prints_the_config_with_the_overrides_and_builds_nothing(tmp_path):
    """`--dry-run` shows the config the run would use (overrides and options in any order) and writes nothing."""
    command = [sys.executable, str(SCRIPT), "trainer.max_training_steps=7", "--out", str(tmp_path / "qs"), "--dry-run"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("# resolved SkyRL config\n")
    assert "  max_training_steps: 7\n" in result.stdout
    assert f'  ckpt_path: "{tmp_path / "qs" / "ckpts"}"\n' in result.stdout
    assert not (tmp_path / "qs").exists()  # no data written, no run started

    bad = subprocess.run([*command, "trainer.max_training_step=7"], capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "max_training_steps" in bad.stderr  # a typo is refused with a suggestion
