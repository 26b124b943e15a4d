"""benchmarks/grouped_attention.py end to end on a small workload: both attentions sample the same tokens and the
results file renders."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from render_doc_results import render_grouped_attention  # noqa: E402


def test_a_small_run_samples_the_same_tokens_and_renders(tmp_path):
    command = [sys.executable, str(REPO / "benchmarks" / "grouped_attention.py"), "--workloads", "short"]
    command += ["--rounds", "1", "--new-tokens", "6", "--out", str(tmp_path)]
    printed = subprocess.run(command, capture_output=True, text=True, check=True, timeout=300).stdout
    assert "same tokens: True" in printed
    data = json.loads((tmp_path / "grouped_attention.json").read_text())
    (run,) = data["runs"]
    assert run["new_tokens"] == 6 and run["rows"] == 64
    assert [row["attention"] for row in run["results"]] == ["sdpa", "skyrl_cpu_sdpa"]
    assert run["max_logprob_difference"] <= 1e-6
    table = render_grouped_attention(data)
    assert "`skyrl_cpu_sdpa`" in table and "| yes |" in table
