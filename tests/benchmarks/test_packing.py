"""benchmarks/packing.py's own parts: the GRPO batches it draws and the tokens each setting runs on them."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("packing_benchmark", REPO / "benchmarks" / "packing.py")
packing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(packing)


def test_batches_have_the_shape_they_are_named_for():
    shape = {"prompts": 3, "samples": 4, "prompt_tokens": (5, 9), "response_tokens": (20, 30)}
    batch = packing.grpo_batch(shape, seed=1)
    assert len(batch) == 12 and batch.uids == [str(i // 4) for i in range(12)]
    prompts = batch.attention_mask[:, : batch.prompt_width].sum(1)
    responses = batch.attention_mask[:, batch.prompt_width :].sum(1)
    assert all(5 <= p <= 9 for p in prompts.tolist()) and all(20 <= r <= 30 for r in responses.tolist())
    groups = batch.input_ids[:, : batch.prompt_width].view(3, 4, -1)
    assert (groups == groups[:, :1]).all() and not (groups[0] == groups[1]).all()  # one prompt per group


def test_token_counts_by_hand():
    shape = {"prompts": 2, "samples": 3, "prompt_tokens": (4, 4), "response_tokens": (10, 10)}
    counts = packing.token_counts(packing.grpo_batch(shape))
    # Padded: 2 distinct prompts of 4 columns, then 6 responses of 10; packed: each prompt once plus 9 response
    # tokens per row (the last one predicts nothing); prompts repeated: 6 x (4 + 9).
    assert counts == {"padded": 2 * 4 + 6 * 10, "packed": 2 * 4 + 6 * 9, "packed, prompts repeated": 6 * 13}
    alone = packing.token_counts(packing.grpo_batch({**shape, "prompts": 6, "samples": 1}))
    assert alone["padded"] == 6 * (4 + 10)  # no prompt repeats: every row padded to the full width
