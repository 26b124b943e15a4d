"""benchmarks/prefix_cache.py end to end on a small workload: both settings produce the same conversations, the
cache prefills fewer prompt tokens, and the results file renders."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
from render_doc_results import render_prefix_cache  # noqa: E402

from skyrl_train.models.tokenizer import build_char_tokenizer  # noqa: E402

_spec = importlib.util.spec_from_file_location("prefix_cache_benchmark", REPO / "benchmarks" / "prefix_cache.py")
benchmark = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(benchmark)


def test_a_small_run_reuses_prefixes_and_renders(tmp_path):
    command = [sys.executable, str(REPO / "benchmarks" / "prefix_cache.py"), "--size", "1", "--sessions", "3"]
    command += ["--turns", "3", "--rounds", "1", "--out", str(tmp_path)]
    printed = subprocess.run(command, capture_output=True, text=True, check=True, timeout=300).stdout
    assert "same tokens with and without the cache: True" in printed
    data = json.loads((tmp_path / "prefix_cache.json").read_text())
    rows = {row["setting"]: row for row in data["rows"]}
    # Off, every turn prefills its whole conversation; on, turns 2 and 3 prefill their new tokens (the observation
    # and the last generated token, which was sampled but never fed) on top of turn 1's prompts.
    work = data["workload"]
    first_turn = sum(len(prompt) for prompt in benchmark.first_prompts(build_char_tokenizer(), 3))
    assert rows["on"]["prefilled"] == first_turn + 3 * 2 * (work["observation_tokens"] + 1)
    grown = work["new_tokens"] + work["observation_tokens"]  # what each turn adds to a conversation
    assert rows["off"]["prefilled"] == 3 * first_turn + 3 * grown * (0 + 1 + 2)
    assert "| on |" in render_prefix_cache(data) and "the same tokens" in render_prefix_cache(data)
