"""The corrections benchmarks/off_policy_corrections.py compares make valid configs that switch on what they say."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
_spec = importlib.util.spec_from_file_location(
    "off_policy_corrections", REPO / "benchmarks" / "off_policy_corrections.py"
)
corrections = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corrections)
bench = corrections.bench


def test_each_correction_is_a_valid_fully_async_config_with_its_correction(tmp_path):
    config = bench.CONFIGS["plain"]
    built = {}
    for name, extra in corrections.CORRECTIONS.items():
        base = bench.overrides("model", tmp_path, tmp_path, config, 5) + bench.MODES["fully_async"]
        built[name] = bench.SkyRLConfig.from_cli_overrides(base + extra).trainer.algorithm.off_policy_correction
    assert built["none"].tis_ratio_type is None and built["none"].sequence_mask_metric is None
    assert built["tis"].tis_ratio_type == "token" and not built["tis"].token_mask
    assert built["mis"].tis_ratio_type is None and built["mis"].sequence_mask_metric == "geometric"
    icepop = built["icepop"]
    assert icepop.token_mask and icepop.tis_ratio_type == "token"
    assert icepop.token_tis_ratio_clip_high == icepop.token_mask_high  # weight = ratio inside the band, 0 outside
