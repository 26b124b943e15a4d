"""Packed micro-batches on megatron-core's real `GPTModel` (`workers/strategy/megatron_packing.py`), on CPU ranks
over gloo with the stand-ins of test_megatron_forward.py (`megatron_on_cpu`): packed against padded log-probs and
gradients, and a reference worker's whole packed `forward` through two pipeline stages against the HF model.
(Packed micro-batches through the pipeline schedule alone are a case of test_megatron_forward.py's pipeline test.)"""

import json

import pytest
import torch

from skyrl_train.workers.distributed import free_port

pytestmark = pytest.mark.integration

LOGIT_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4
"""float32 on both sides, different attention kernels: see test_megatron_forward.py's tolerances."""


PACKED_SCRIPT = (
    ("join", "cuda", "recompute"),
    r"""
from megatron.core import parallel_state
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.workers.strategy.megatron_model import MegatronCausalLM

parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
report = {}
for name in cases:
    hf, arch, gpt = hf_and_gpt(name, recompute=sys.argv[6] == "recompute")  # gradient checkpointing
    model = MegatronCausalLM(gpt, arch.vocab_size)
    # [pad.. prompt | response ..pad] rows of varied lengths; rows 0-2 repeat one prompt (a GRPO group), row 3 has
    # no padding at all and row 4 a one-token response
    prompt_width, prompt_lengths, response_lengths = 6, [4, 4, 4, 6, 3], [5, 2, 4, 5, 1]
    generator = torch.Generator().manual_seed(1)
    rows = len(prompt_lengths)
    input_ids = torch.randint(0, arch.vocab_size, (rows, prompt_width + 5), generator=generator)
    input_ids[1:3, :prompt_width] = input_ids[0, :prompt_width]
    attention_mask = torch.zeros_like(input_ids)
    for row, (prompt, response) in enumerate(zip(prompt_lengths, response_lengths)):
        attention_mask[row, prompt_width - prompt : prompt_width + response] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    response_mask = attention_mask[:, prompt_width:].float()
    weights = torch.randn(rows, 5, generator=generator) * response_mask
    results = {}
    for mode in ("padded", "packed", "packed_shared_prompts"):
        gpt.zero_grad(set_to_none=True)
        logprobs, _ = response_logprobs(
            model, input_ids, attention_mask, position_ids, prompt_width,
            share_prompts=mode == "packed_shared_prompts", pack=mode != "padded",
        )
        (logprobs * weights).sum().backward()
        for param in gpt.parameters():  # sequence parallel: each rank's part of a norm's gradient depends on its tokens
            if getattr(param, "sequence_parallel", False) and world > 1:
                dist.all_reduce(param.grad)
        grads = {n: p.grad.clone() for n, p in gpt.named_parameters() if p.grad is not None}
        results[mode] = (logprobs.detach() * response_mask, grads)
    padded_logprobs, padded_grads = results["padded"]
    entry = {"scale": padded_logprobs.abs().max().item(), "grad_tensors": len(padded_grads)}
    for mode in ("packed", "packed_shared_prompts"):
        logprobs, grads = results[mode]
        entry[mode] = (logprobs - padded_logprobs).abs().max().item()
        entry[mode + "_grad_relative"] = max(
            (grads[n] - padded_grads[n]).abs().max().item() / max(padded_grads[n].abs().max().item(), 1e-12)
            for n in padded_grads
        )
    report[name] = entry
write_report(report)
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
""",
)


WORKER_SCRIPT = (
    ("cuda", "strategy", "schedule"),
    r"""
# the worker joins its process group itself (gloo on CPU)
from skyrl_train.workers import RefWorker

batch = torch.load(f"{folder}/batch.pt", weights_only=False)
report = {}
for name, setting in json.loads(sys.argv[6]).items():  # each worker on its own rendezvous port
    worker = RefWorker("ref", rank, world, "127.0.0.1", setting["port"], setting["config"], num_threads=1)
    worker.init_model()
    calls = []
    worker.strategy.ddp_model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True
    )
    logprobs = worker.forward(batch)
    torch.save(logprobs, f"{folder}/{name}_{rank}.pt")
    report[name] = {"packs_rows": worker.packs_rows, "stage_layers": worker.strategy.stage_layers.stop, "calls": calls}
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
write_report(report)
""",
)


@pytest.mark.parametrize(("tp", "recompute"), [(1, False), (2, False), (1, True)], ids=["tp1", "tp2", "tp1-recompute"])
def test_packed_rows_give_the_padded_log_probs_and_gradients(megatron_on_cpu, tmp_path, tiny_hf_config, tp, recompute):
    """`trainer.remove_microbatch_padding` on the Megatron model: rows of varied lengths packed into one sequence
    (position ids restarting per row, attention kept inside each row, a repeated prompt packed once or not) give the
    padded forward's log-probs, and the same loss gives the same gradients, at tp=1 (dense, tied, MoE) and tp=2
    (sequence parallel, MoE included; a packed sequence of an odd length gets one more segment of padding).
    Both sides are megatron-core's model in float32 with different attention kernels (SDPA over segments vs
    megatron's masked softmax), so they agree to float rounding; a row seeing another row's tokens, or a token
    rotated by its packed index instead of its position, is off by 1e-2 or more. `recompute`: with megatron's activation
    recomputation (`gradient_checkpointing`, on by default for the policy), which reruns each layer's forward, packed
    arguments included, in the backward pass (3 more stand-ins: the CUDA RNG states it saves and restores)."""
    pytest.importorskip("megatron.core")
    configs = {"qwen2": tiny_hf_config("qwen2"), "qwen3_moe": tiny_hf_config("qwen3_moe")}
    if tp == 1:
        configs["llama_tied"] = tiny_hf_config("llama", tie_word_embeddings=True)
    report = megatron_on_cpu.run(tmp_path, tp, configs, PACKED_SCRIPT, extra=("recompute" if recompute else "plain",))
    for name, entry in report.items():
        assert entry["grad_tensors"] > 0, (name, entry)
        for mode in ("packed", "packed_shared_prompts"):
            assert entry[mode] <= LOGIT_TOLERANCE * max(entry["scale"], 1.0), (name, mode, entry)
            assert entry[mode + "_grad_relative"] <= GRAD_TOLERANCE, (name, mode, entry)


def test_the_ref_worker_packs_its_micro_batches_through_two_pipeline_stages(
    megatron_on_cpu, tmp_path, worker_config, make_grouped_batch
):
    """The whole worker path of packing on Megatron: a `RefWorker` with `strategy=megatron`, 2 pipeline stages and
    `remove_microbatch_padding` left on `auto` packs (`_decide_packing`), its `model_inputs` feed megatron-core's
    schedule one packed sequence per micro-batch, and `forward` gives the log-probs of the same worker run padded
    and of the Hugging Face model itself."""
    pytest.importorskip("megatron.core")
    from skyrl_train.models.logprobs import response_logprobs
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
    from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer

    hf = build_tiny_model(TinyModelSpec(size=2), seed=0).float().eval()  # 2 layers: one per stage
    hf.save_pretrained(tmp_path / "model")
    save_tokenizer(build_char_tokenizer(), tmp_path / "model")
    batch = make_grouped_batch(groups=3, samples=4, seed=5)
    torch.save(batch, tmp_path / "batch.pt")
    model = f"{tmp_path / 'model'}"
    megatron = [
        "trainer.strategy=megatron",
        f"trainer.policy.model.path={model}",
        f"trainer.ref.model.path={model}",
        "trainer.ref.megatron.pipeline_model_parallel_size=2",
        "trainer.ref.megatron.param_dtype=float32",
        "trainer.micro_forward_batch_size_per_gpu=4",
    ]
    settings = {
        layout: {"port": free_port(), "config": worker_config(*megatron, f"trainer.remove_microbatch_padding={flag}")}
        for layout, flag in (("padded", "false"), ("packed", "auto"))
    }
    report = megatron_on_cpu.run(tmp_path, 2, {}, WORKER_SCRIPT, extra=(json.dumps(settings),))
    assert not report["padded"]["packs_rows"] and report["packed"]["packs_rows"]
    assert report["packed"]["stage_layers"] == 1  # rank 0 is the first of 2 stages
    assert len(report["packed"]["calls"]) == 3 and all(rows == 1 for rows, _ in report["packed"]["calls"])
    assert all(rows == 4 for rows, _ in report["padded"]["calls"])
    with torch.no_grad():
        expected, _ = response_logprobs(
            hf, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width
        )
    expected = expected * batch.response_mask
    for layout in ("padded", "packed"):
        for rank in range(2):  # every stage returns the last stage's log-probs
            got = torch.load(tmp_path / f"{layout}_{rank}.pt")
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0, msg=f"{layout}, rank {rank}")
