"""megatron-core's real `GPTModel` forward and backward on CPU, against the Hugging Face model it was converted from.

The Megatron strategy needs CUDA for training (test_megatron_gpu.py, never run here), but the model itself is plain
torch on the local layer spec. Three CUDA-only calls stand between it and a CPU run, and the rank script below
replaces exactly those (nothing else is mocked; all the model code, the tensor-parallel layers and their gloo
collectives are megatron-core's own):

- `torch.cuda.current_device()`: the rotary embedding and the MoE router move their buffers there; "cpu" here;
- `torch.cuda.synchronize()`: a no-op;
- the model-parallel CUDA RNG tracker's `fork()`: it swaps CUDA RNG states around attention dropout (0 here); a
  context that does nothing.

What this checks, per architecture family and for tensor parallelism over 2 gloo ranks: the logits of left-padded
rows equal the HF model's, and the gradients of the same loss, gathered over the ranks and converted back to HF
names, equal the HF model's gradients. That covers the weight conversion and sharding, the attention mask and
positions, and the MoE routing settings (Qwen-MoE's `norm_topk_prob` both ways).

The forward-only `MegatronStrategy` (the reference role's) also runs here end to end with more stand-ins:
`require_megatron_runtime` (it refuses a CPU device), `torch.cuda.set_device`, `Module.cuda` / `Tensor.cuda` and the
RNG tracker's `add`. Its `prepare` loads the HF model's weights into the rank's shard, and `full_state_dict` (every
weight sync) and `save_hf_model` gather them back over the tensor-parallel ranks or pipeline stages. With pipeline
stages its `run_micro_batches` drives megatron-core's own 1F1B schedule, whose few `device="cuda"` allocations go
to the CPU. The distributed optimizer cannot run on CPU (it checks for `torch.cuda.FloatTensor` parameters), so the
training strategy stays GPU-only (test_megatron_gpu.py).
"""

import subprocess
import sys

import pytest
import torch

from skyrl_train.workers.distributed import free_port

pytestmark = pytest.mark.integration

RANK_ARGUMENTS = r"""
import contextlib, functools, json, sys, warnings
warnings.filterwarnings("ignore")
import torch
import torch.distributed as dist

folder, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cases = json.loads(sys.argv[5])
"""

CUDA_CALL_STAND_INS = r"""
# --- stand-ins for the CUDA-only calls of megatron-core's forward (see the test module's docstring) ---
torch.cuda.current_device = lambda: "cpu"
torch.cuda.synchronize = lambda *args, **kwargs: None
from megatron.core.tensor_parallel import random as megatron_random
megatron_random.CudaRNGStatesTracker.fork = contextlib.contextmanager(lambda self, name=None: (yield))
"""

FORWARD_STAND_INS = (
    RANK_ARGUMENTS
    + 'dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)\n'
    + CUDA_CALL_STAND_INS
)

STRATEGY_STAND_INS = r"""
# --- and of the forward-only strategy's prepare ---
torch.cuda.set_device = lambda *args, **kwargs: None
torch.nn.Module.cuda = lambda self, *args, **kwargs: self
torch.Tensor.cuda = lambda self, *args, **kwargs: self
megatron_random.CudaRNGStatesTracker.add = lambda self, name, seed: None
import skyrl_train.workers.strategy.megatron as megatron_strategy
megatron_strategy.require_megatron_runtime = lambda device: None
"""

SCHEDULE_STAND_INS = r"""
# --- and of the pipeline schedule, which allocates a few bookkeeping tensors with device="cuda" ---
def _on_cpu(factory):
    @functools.wraps(factory)
    def wrapped(*args, **kwargs):
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "cpu"
        return factory(*args, **kwargs)

    return wrapped


for _name in ("tensor", "empty", "zeros", "ones", "full"):
    setattr(torch, _name, _on_cpu(getattr(torch, _name)))
"""

RANK_SCRIPT = FORWARD_STAND_INS + r"""
from megatron.core import parallel_state
from transformers import AutoModelForCausalLM, AutoConfig
from skyrl_train.models.megatron_convert import (
    arch_from_hf_config, gather_state, hf_to_megatron, megatron_to_hf, shard_state, strip_extra_state,
)
from skyrl_train.workers.strategy.megatron_model import MegatronCausalLM, build_gpt_model

parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).float()
    arch = arch_from_hf_config(config)
    _, gpt = build_gpt_model(arch, torch.float32, tensor_parallel_size=world, use_cpu_initialization=True)
    own = gpt.state_dict()
    local = shard_state(hf_to_megatron(hf.state_dict(), arch, world), world, rank)
    local.update({n: v for n, v in own.items() if n.endswith("._extra_state")})
    gpt.load_state_dict(local, strict=True)
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, arch.vocab_size, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0
    attention_mask[1, :1] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    weights = torch.randn(3, 12, arch.vocab_size, generator=generator) * attention_mask[..., None]
    if arch.is_moe and world > 1:
        # forward-only roles run MoE over tensor-parallel ranks in eval mode (training needs sequence parallelism)
        gpt.eval()
    mine = MegatronCausalLM(gpt, arch.vocab_size)(input_ids, attention_mask, position_ids).logits
    theirs = hf(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    real = attention_mask.bool()
    entry = {"logits": (mine - theirs)[real].abs().max().item(), "scale": theirs[real].abs().max().item()}
    if not gpt.training:  # a forward-only role's model: no gradients to compare
        gpt.train()
        try:
            MegatronCausalLM(gpt, arch.vocab_size)(input_ids, attention_mask, position_ids)
            entry["train_mode"] = "ran"
        except ValueError as exc:
            entry["train_mode"] = str(exc)
        report[name] = entry
        continue
    (mine * weights).sum().backward()
    (theirs * weights).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in gpt.named_parameters()}
    parts = [None] * world
    dist.all_gather_object(parts, grads)
    hf_grads = megatron_to_hf(gather_state([parts]), arch)
    worst = {}
    for key, param in hf.named_parameters():
        difference = (hf_grads[key] - param.grad).abs().max().item()
        worst[key] = difference / max(param.grad.abs().max().item(), 1e-12)
    entry["grad_worst"] = max(worst, key=worst.get)
    entry["grad_relative"] = worst[entry["grad_worst"]]
    report[name] = entry
if rank == 0:
    with open(f"{folder}/report.json", "w") as handle:
        json.dump(report, handle)
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
"""


STRATEGY_SCRIPT = FORWARD_STAND_INS + STRATEGY_STAND_INS + r"""
from transformers import AutoConfig, AutoModelForCausalLM
from skyrl_train.config.roles import MegatronConfig

report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).float().eval()
    expected_state = {key: value.clone() for key, value in hf.state_dict().items()}
    strategy = megatron_strategy.MegatronStrategy(
        MegatronConfig(tensor_model_parallel_size=world, param_dtype="float32"), torch.device("cpu"), None
    )
    model = strategy.prepare(hf)
    input_ids = torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        mine = model(input_ids, attention_mask, position_ids).logits
        theirs = hf(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    real = attention_mask.bool()
    entry = {"logits": (mine - theirs)[real].abs().max().item(), "eval_mode": not strategy.ddp_model.training}
    gathered = strategy.full_state_dict()
    strategy.save_hf_model(f"{folder}/{name}_export")
    if rank == 0:
        entry["keys_equal"] = sorted(gathered) == sorted(expected_state)
        entry["gathered_exact"] = all(torch.equal(gathered[key], expected_state[key]) for key in expected_state)
        reloaded = AutoModelForCausalLM.from_pretrained(f"{folder}/{name}_export").float().eval()
        entry["export_exact"] = all(
            torch.equal(reloaded.state_dict()[key], expected_state[key]) for key in expected_state
        )
    else:
        entry["other_ranks_get_nothing"] = gathered == {}
    report[name] = entry
if rank == 0:
    with open(f"{folder}/report.json", "w") as handle:
        json.dump(report, handle)
dist.destroy_process_group()
"""


PIPELINE_SCRIPT = FORWARD_STAND_INS + STRATEGY_STAND_INS + SCHEDULE_STAND_INS + r"""
from transformers import AutoConfig, AutoModelForCausalLM
from skyrl_train.config.roles import MegatronConfig
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.models.megatron_convert import gather_state, megatron_to_hf
from skyrl_train.models.megatron_pipeline import EMBEDDING, OUTPUT, merge_stage_states
from skyrl_train.models.packing import pack_rows

report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).float().eval()
    expected_state = {key: value.clone() for key, value in hf.state_dict().items()}
    tp = int(sys.argv[6])
    megatron = MegatronConfig(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=world // tp,
        num_layers_in_first_pipeline_stage=1,
        param_dtype="float32",
    )
    strategy = megatron_strategy.MegatronStrategy(megatron, torch.device("cpu"), None)
    model = strategy.prepare(hf)
    generator = torch.Generator().manual_seed(1)
    entries = []
    for rows, width in ((3, 11), (2, 8)):  # micro-batches of different shapes
        input_ids = torch.randint(0, config.vocab_size, (rows, width), generator=generator)
        input_ids[-1, :4] = input_ids[-2, :4]  # a repeated prompt, as a GRPO group's samples have
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, :2] = 0
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        weights = torch.randn(rows, width - 4, generator=generator)
        entries.append((input_ids, attention_mask, position_ids, weights))

    pack = sys.argv[7] == "packed"  # packed: each micro-batch is one sequence

    def body(entry, call):
        input_ids, attention_mask, position_ids, weights = entry
        logprobs, _ = response_logprobs(call, input_ids, attention_mask, position_ids, 4, share_prompts=pack, pack=pack)
        return (logprobs * weights).sum(), logprobs.detach()

    def inputs(entry):  # what the workers' model_inputs gives the schedule
        if pack:
            return pack_rows(entry[0], entry[1], entry[2], 4, share_prompts=True).model_inputs()
        return {"input_ids": entry[0], "attention_mask": entry[1], "position_ids": entry[2]}

    expected_logprobs, expected_loss = [], 0.0
    for entry in entries:
        logprobs, _ = response_logprobs(hf, *entry[:3], 4)
        expected_logprobs.append(logprobs.detach())
        expected_loss = expected_loss + (logprobs * entry[3]).sum()
    expected_loss.backward()
    entry_report = {"stage_layers": [strategy.stage_layers.start, strategy.stage_layers.stop]}
    with torch.no_grad():
        got = strategy.run_micro_batches(model, entries, body, forward_only=True, inputs=inputs)
    entry_report["forward_logprobs"] = max((a - b).abs().max().item() for a, b in zip(got, expected_logprobs))
    got = strategy.run_micro_batches(model, entries, body, forward_only=False, inputs=inputs)
    entry_report["train_logprobs"] = max((a - b).abs().max().item() for a, b in zip(got, expected_logprobs))
    gpt = strategy.ddp_model
    grads = {n: p.grad.detach().clone() for n, p in gpt.named_parameters() if p.grad is not None}
    from megatron.core import parallel_state

    ranks = [None] * world
    place = (parallel_state.get_pipeline_model_parallel_rank(), parallel_state.get_tensor_model_parallel_rank())
    dist.all_gather_object(ranks, (place, grads, strategy.stage_layers))
    stages = []
    for stage in range(world // tp):  # each stage's gradients gathered over its tensor-parallel ranks
        shards = sorted((where[1], shard, layers) for where, shard, layers in ranks if where[0] == stage)
        stages.append((gather_state([[shard for _, shard, _ in shards]]), shards[0][2]))
    if config.tie_word_embeddings:
        # what finalize_model_grads' embedding all-reduce does at optimizer_step: the tied copies' gradients add up
        stages[0][0][EMBEDDING] = stages[0][0][EMBEDDING] + stages[-1][0][OUTPUT]
    hf_grads = megatron_to_hf(merge_stage_states(stages, config.tie_word_embeddings), strategy.arch)
    worst = {}
    for key, param in hf.named_parameters():
        worst[key] = (hf_grads[key] - param.grad).abs().max().item() / max(param.grad.abs().max().item(), 1e-12)
    entry_report["grad_worst"] = max(worst, key=worst.get)
    entry_report["grad_relative"] = worst[entry_report["grad_worst"]]
    gathered = strategy.full_state_dict()
    strategy.save_hf_model(f"{folder}/{name}_export")
    if rank == 0:
        entry_report["gathered_exact"] = sorted(gathered) == sorted(expected_state) and all(
            torch.equal(gathered[key], expected_state[key]) for key in expected_state
        )
        reloaded = AutoModelForCausalLM.from_pretrained(f"{folder}/{name}_export").float()
        entry_report["export_exact"] = all(
            torch.equal(reloaded.state_dict()[key], expected_state[key]) for key in expected_state
        )
    report[name] = entry_report
    parallel_state.destroy_model_parallel()  # the next model builds its own stages
if rank == 0:
    with open(f"{folder}/report.json", "w") as handle:
        json.dump(report, handle)
dist.destroy_process_group()
"""


PACKED_SCRIPT = FORWARD_STAND_INS + r"""
from megatron.core import parallel_state
from transformers import AutoConfig, AutoModelForCausalLM
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.models.megatron_convert import arch_from_hf_config, hf_to_megatron, shard_state
from skyrl_train.workers.strategy.megatron_model import MegatronCausalLM, build_gpt_model

parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).float()
    arch = arch_from_hf_config(config)
    _, gpt = build_gpt_model(arch, torch.float32, tensor_parallel_size=world, use_cpu_initialization=True)
    local = shard_state(hf_to_megatron(hf.state_dict(), arch, world), world, rank)
    local.update({n: v for n, v in gpt.state_dict().items() if n.endswith("._extra_state")})
    gpt.load_state_dict(local, strict=True)
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
    trainable = not (arch.is_moe and world > 1)  # MoE over tensor-parallel ranks runs forward-only (eval mode)
    if not trainable:
        gpt.eval()
    results = {}
    for mode in ("padded", "packed", "packed_shared_prompts"):
        gpt.zero_grad(set_to_none=True)
        with torch.set_grad_enabled(trainable):
            logprobs, _ = response_logprobs(
                model, input_ids, attention_mask, position_ids, prompt_width,
                share_prompts=mode == "packed_shared_prompts", pack=mode != "padded",
            )
        if trainable:
            (logprobs * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in gpt.named_parameters() if p.grad is not None}
        results[mode] = (logprobs.detach() * response_mask, grads)
    padded_logprobs, padded_grads = results["padded"]
    entry = {"scale": padded_logprobs.abs().max().item(), "grad_tensors": len(padded_grads)}
    for mode in ("packed", "packed_shared_prompts"):
        logprobs, grads = results[mode]
        entry[mode] = (logprobs - padded_logprobs).abs().max().item()
        if trainable:
            entry[mode + "_grad_relative"] = max(
                (grads[n] - padded_grads[n]).abs().max().item() / max(padded_grads[n].abs().max().item(), 1e-12)
                for n in padded_grads
            )
    report[name] = entry
if rank == 0:
    with open(f"{folder}/report.json", "w") as handle:
        json.dump(report, handle)
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
"""


WORKER_SCRIPT = RANK_ARGUMENTS + CUDA_CALL_STAND_INS + STRATEGY_STAND_INS + SCHEDULE_STAND_INS + r"""
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
if rank == 0:
    with open(f"{folder}/report.json", "w") as handle:
        json.dump(report, handle)
"""


def _run(tmp_path, world, configs, script_text=RANK_SCRIPT, extra=()):
    for name, config in configs.items():
        config.save_pretrained(tmp_path / name)
    script = tmp_path / "rank.py"
    script.write_text(script_text, encoding="utf-8")
    port = str(free_port())
    import json

    names = json.dumps(sorted(configs))
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), str(rank), str(world), port, names, *extra],
            stderr=subprocess.PIPE,
        )
        for rank in range(world)
    ]
    for rank, process in enumerate(ranks):
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, f"rank {rank}: {stderr.decode()[-3000:]}"
    return json.loads((tmp_path / "report.json").read_text())


# float32 on both sides; the two models sum the same products in different orders (fused QKV, [gate; up], a
# different attention kernel), so logits agree to a few ulps of their size (~1e-7 relative) and gradients to about
# 1e-5 of the largest entry of each tensor. A wrong routing weight or a misplaced shard is off by 1e-3 or more.
LOGIT_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4


def _check(report):
    for name, entry in report.items():
        assert entry["logits"] <= LOGIT_TOLERANCE * max(entry["scale"], 1.0), (name, entry)
        if "train_mode" not in entry:
            assert entry["grad_relative"] <= GRAD_TOLERANCE, (name, entry)


def test_one_rank_every_family_matches_the_hf_model(tmp_path, tiny_hf_config):
    pytest.importorskip("megatron.core")
    configs = {
        "qwen2": tiny_hf_config("qwen2"),
        "llama_tied": tiny_hf_config("llama", tie_word_embeddings=True),
        "qwen3_moe_raw_topk": tiny_hf_config("qwen3_moe"),  # transformers' default norm_topk_prob=False
        "qwen3_moe_normalized": tiny_hf_config("qwen3_moe", norm_topk_prob=True),  # as Qwen3-30B-A3B ships
        "qwen2_moe_shared_expert": tiny_hf_config("qwen2_moe"),
        "mixtral": tiny_hf_config("mixtral"),
    }
    _check(_run(tmp_path, 1, configs))


def test_two_tensor_parallel_ranks_match_the_hf_model(tmp_path, tiny_hf_config):
    pytest.importorskip("megatron.core")
    report = _run(tmp_path, 2, {"qwen2": tiny_hf_config("qwen2"), "qwen3_moe": tiny_hf_config("qwen3_moe")})
    _check(report)
    assert "grad_relative" in report["qwen2"]
    # Why the strategy refuses to train a MoE model over tensor-parallel ranks (check_moe_tensor_parallel): the
    # pinned megatron-core raises in training mode without sequence parallelism. If a release lifts this, the
    # refusal can go.
    assert "sequence parallelism" in report["qwen3_moe"]["train_mode"]


def test_the_forward_only_strategy_loads_gathers_and_exports_over_two_tensor_parallel_ranks(tmp_path, tiny_hf_config):
    pytest.importorskip("megatron.core")
    configs = {"qwen2": tiny_hf_config("qwen2"), "qwen3_moe": tiny_hf_config("qwen3_moe", norm_topk_prob=True)}
    report = _run(tmp_path, 2, configs, STRATEGY_SCRIPT)
    for name, entry in report.items():
        assert entry["logits"] <= LOGIT_TOLERANCE, (name, entry)
        assert entry["eval_mode"], name  # forward-only roles run in eval mode (MoE over TP ranks needs it)
        # weights untouched since loading: gathering and converting back must give them bit for bit
        assert entry["keys_equal"] and entry["gathered_exact"] and entry["export_exact"], (name, entry)


@pytest.mark.parametrize(
    ("world", "tp", "layout"),
    [(2, 1, "padded"), (4, 2, "padded"), (2, 1, "packed")],
    ids=["pp2", "tp2xpp2", "pp2-packed"],
)
def test_two_pipeline_stages_give_the_hf_log_probs_gradients_and_weights(tmp_path, tiny_hf_config, world, tp, layout):
    """`pipeline_model_parallel_size=2` with an uneven first stage (1 of 3 layers), alone and with 2 tensor-parallel
    ranks per stage (4 ranks, megatron-core's rank order), run by the forward-only strategy through megatron-core's
    1F1B schedule over gloo: the worker-style bodies run on the last stage, every stage gets
    their log-probs, the gradients of every stage (the tied embedding's two copies summed, as the optimizer step's
    `finalize_model_grads` does) equal the HF model's, and the weights gather back exactly. `packed`: each
    micro-batch runs as one packed sequence (a repeated prompt packed once) through the stages."""
    pytest.importorskip("megatron.core")
    configs = {
        "qwen2": tiny_hf_config("qwen2", num_hidden_layers=3),
        "llama_tied": tiny_hf_config("llama", num_hidden_layers=3, tie_word_embeddings=True),
    }
    report = _run(tmp_path, world, configs, PIPELINE_SCRIPT, extra=(str(tp), layout))
    for name, entry in report.items():
        assert entry["stage_layers"] == [0, 1], (name, entry)  # rank 0 is the first stage, holding 1 layer
        assert entry["forward_logprobs"] <= 1e-5 and entry["train_logprobs"] <= 1e-5, (name, entry)
        assert entry["grad_relative"] <= GRAD_TOLERANCE, (name, entry)
        assert entry["gathered_exact"] and entry["export_exact"], (name, entry)


@pytest.mark.parametrize("tp", [1, 2])
def test_packed_rows_give_the_padded_log_probs_and_gradients(tmp_path, tiny_hf_config, tp):
    """`trainer.remove_microbatch_padding` on the Megatron model: rows of varied lengths packed into one sequence
    (position ids restarting per row, attention kept inside each row, a repeated prompt packed once or not) give the
    padded forward's log-probs, and the same loss gives the same gradients, at tp=1 (dense, tied, MoE) and tp=2.
    Both sides are megatron-core's model in float32 with different attention kernels (SDPA over segments vs
    megatron's masked softmax), so they agree to float rounding; a row seeing another row's tokens, or a token
    rotated by its packed index instead of its position, is off by 1e-2 or more."""
    pytest.importorskip("megatron.core")
    configs = {"qwen2": tiny_hf_config("qwen2"), "qwen3_moe": tiny_hf_config("qwen3_moe")}
    if tp == 1:
        configs["llama_tied"] = tiny_hf_config("llama", tie_word_embeddings=True)
    report = _run(tmp_path, tp, configs, PACKED_SCRIPT)
    for name, entry in report.items():
        trainable = not (name == "qwen3_moe" and tp > 1)
        assert entry["grad_tensors"] > 0 or not trainable, (name, entry)
        for mode in ("packed", "packed_shared_prompts"):
            assert entry[mode] <= LOGIT_TOLERANCE * max(entry["scale"], 1.0), (name, mode, entry)
            if trainable:
                assert entry[mode + "_grad_relative"] <= GRAD_TOLERANCE, (name, mode, entry)


def test_the_ref_worker_packs_its_micro_batches_through_two_pipeline_stages(
    tmp_path, worker_config, make_grouped_batch
):
    """The whole worker path of packing on Megatron: a `RefWorker` with `strategy=megatron`, 2 pipeline stages and
    `remove_microbatch_padding` left on `auto` packs (`_decide_packing`), its `model_inputs` feed megatron-core's
    schedule one packed sequence per micro-batch, and `forward` gives the log-probs of the same worker run padded
    and of the Hugging Face model itself."""
    pytest.importorskip("megatron.core")
    import json

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
    report = _run(tmp_path, 2, {}, WORKER_SCRIPT, extra=(json.dumps(settings),))
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
