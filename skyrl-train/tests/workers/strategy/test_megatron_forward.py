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
to the CPU. The distributed optimizer cannot run on CPU (it checks for `torch.cuda.FloatTensor` parameters): the
trainable strategy runs here with a stand-in for it only (its DDP wrapper, gradient buffers and the gradient reduction
before a step are megatron-core's own), and its optimizer step stays GPU-only (test_megatron_gpu.py).

Packed micro-batches run through the pipeline stages here; test_megatron_packing.py holds the rest of them.
"""

import pytest

pytestmark = pytest.mark.integration

FORWARD, STRATEGY, SCHEDULE, OPTIMIZER = ("join", "cuda"), ("strategy",), ("schedule",), ("optimizer",)
"""The stand-ins a rank script needs (`megatron_on_cpu` in conftest.py): joining a gloo group and the forward's CUDA
calls, the strategy's, the pipeline schedule's, the distributed optimizer's."""

RANK_SCRIPT = (
    FORWARD,
    r"""
from megatron.core import parallel_state
from skyrl_train.models.megatron_convert import gather_state, megatron_to_hf
from skyrl_train.workers.strategy.megatron_model import MegatronCausalLM

parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
report = {}
for name in cases:
    hf, arch, gpt = hf_and_gpt(name)
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, arch.vocab_size, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0
    attention_mask[1, :1] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    weights = torch.randn(3, 12, arch.vocab_size, generator=generator) * attention_mask[..., None]
    mine = MegatronCausalLM(gpt, arch.vocab_size)(input_ids, attention_mask, position_ids).logits
    theirs = hf(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    real = attention_mask.bool()
    entry = {"logits": (mine - theirs)[real].abs().max().item(), "scale": theirs[real].abs().max().item()}
    (mine * weights).sum().backward()
    (theirs * weights).sum().backward()
    for param in gpt.parameters():  # what finalize_model_grads sums under sequence parallelism (norms, router)
        if getattr(param, "sequence_parallel", False) and world > 1:
            dist.all_reduce(param.grad)
    grads = {n: p.grad.detach().clone() for n, p in gpt.named_parameters()}
    parts = [None] * world
    dist.all_gather_object(parts, grads)
    hf_grads = megatron_to_hf(gather_state([parts]), arch)
    entry["grad_worst"], entry["grad_relative"] = worst_gradient(hf, hf_grads)
    report[name] = entry
write_report(report)
parallel_state.destroy_model_parallel()
dist.destroy_process_group()
""",
)


STRATEGY_SCRIPT = (
    FORWARD + STRATEGY,
    r"""
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
write_report(report)
dist.destroy_process_group()
""",
)


PIPELINE_SCRIPT = (
    FORWARD + STRATEGY + SCHEDULE + OPTIMIZER,
    r"""
from transformers import AutoConfig, AutoModelForCausalLM
from skyrl_train.config.roles import MegatronConfig, OptimizerConfig
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
    trainable = sys.argv[8] == "trainable"  # the policy's strategy (DDP), else the reference model's
    strategy = megatron_strategy.MegatronStrategy(
        megatron, torch.device("cpu"), OptimizerConfig() if trainable else None
    )
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
    if trainable:  # the optimizer step's reduction, then megatron's gradient buffers
        strategy.reduce_gradients()
        grads = {n: p.main_grad.detach().clone() for n, p in strategy._gpt().named_parameters()}
    else:  # the sums reduce_gradients does under sequence parallelism (tp > 1): each rank saw its share of tokens
        from megatron.core import parallel_state

        for param in strategy._gpt().parameters():
            if getattr(param, "sequence_parallel", False) and param.grad is not None and tp > 1:
                dist.all_reduce(param.grad, group=parallel_state.get_tensor_model_parallel_group())
        grads = {n: p.grad.detach().clone() for n, p in strategy._gpt().named_parameters() if p.grad is not None}
    from megatron.core import parallel_state

    ranks = [None] * world
    place = (parallel_state.get_pipeline_model_parallel_rank(), parallel_state.get_tensor_model_parallel_rank())
    dist.all_gather_object(ranks, (place, grads, strategy.stage_layers))
    stages = []
    for stage in range(world // tp):  # each stage's gradients gathered over its tensor-parallel ranks
        shards = sorted((where[1], shard, layers) for where, shard, layers in ranks if where[0] == stage)
        stages.append((gather_state([[shard for _, shard, _ in shards]]), shards[0][2]))
    if config.tie_word_embeddings and not trainable:
        # what reduce_gradients (finalize_model_grads) does in the trainable case: the tied copies' gradients add up
        stages[0][0][EMBEDDING] = stages[0][0][EMBEDDING] + stages[-1][0][OUTPUT]
    hf_grads = megatron_to_hf(merge_stage_states(stages, config.tie_word_embeddings), strategy.arch)
    entry_report["grad_worst"], entry_report["grad_relative"] = worst_gradient(hf, hf_grads)
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
write_report(report)
dist.destroy_process_group()
""",
)


TRAINING_SCRIPT = (
    FORWARD + STRATEGY + OPTIMIZER,
    r"""
from transformers import AutoConfig, AutoModelForCausalLM
from megatron.core import parallel_state
from skyrl_train.config.roles import MegatronConfig, OptimizerConfig
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.models.megatron_convert import gather_state, megatron_to_hf

report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).float()
    strategy = megatron_strategy.MegatronStrategy(
        MegatronConfig(tensor_model_parallel_size=world, param_dtype="float32"), torch.device("cpu"), OptimizerConfig()
    )
    model = strategy.prepare(hf)
    generator = torch.Generator().manual_seed(1)
    entries = []
    for rows in (3, 2):
        input_ids = torch.randint(0, config.vocab_size, (rows, 10), generator=generator)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, :3] = 0
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        entries.append((input_ids, attention_mask, position_ids, torch.randn(rows, 6, generator=generator)))

    def body(entry, call):
        logprobs, _ = response_logprobs(call, *entry[:3], 4)
        return (logprobs * entry[3]).sum(), None

    strategy.run_micro_batches(model, entries, body)
    strategy.reduce_gradients()
    expected = sum((response_logprobs(hf, *entry[:3], 4)[0] * entry[3]).sum() for entry in entries)
    expected.backward()
    grads = {n: p.main_grad.detach().clone() for n, p in strategy._gpt().named_parameters()}
    parts = [None] * world
    dist.all_gather_object(parts, grads, group=parallel_state.get_tensor_model_parallel_group())
    hf_grads = megatron_to_hf(gather_state([parts]), strategy.arch)
    worst_name, worst_relative = worst_gradient(hf, hf_grads)
    report[name] = {"grad_worst": worst_name, "grad_relative": worst_relative}
    parallel_state.destroy_model_parallel()
write_report(report)
dist.destroy_process_group()
""",
)


CHECKPOINT_SCRIPT = (
    FORWARD + STRATEGY + SCHEDULE,
    r"""
from transformers import AutoConfig, AutoModelForCausalLM
from skyrl_train.config.roles import MegatronConfig
from megatron.core import parallel_state

report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    tp = int(sys.argv[6])
    megatron = MegatronConfig(
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=world // tp, param_dtype="float32"
    )
    strategies = []
    for seed in (0, 1):  # two different models: the second loads the first's checkpoint
        torch.manual_seed(seed)
        strategy = megatron_strategy.MegatronStrategy(megatron, torch.device("cpu"), None)
        strategy.prepare(AutoModelForCausalLM.from_config(config).float())
        strategies.append(strategy)
    saved, loaded = strategies
    saved.save_checkpoint(f"{folder}/{name}_ckpt", extra={"step": 3})
    before = {k: v.clone() for k, v in loaded._gpt().state_dict().items() if not k.endswith("_extra_state")}
    extra = loaded.load_checkpoint(f"{folder}/{name}_ckpt")
    expected = saved._gpt().state_dict()
    after = loaded._gpt().state_dict()
    report[name] = {
        "extra": extra,
        "differed_before": any(not torch.equal(before[k], expected[k]) for k in before),
        "equal_after": all(torch.equal(after[k], expected[k]) for k in before),
    }
    parallel_state.destroy_model_parallel()
write_report(report)
dist.destroy_process_group()
""",
)


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


def test_one_rank_every_family_matches_the_hf_model(megatron_on_cpu, tmp_path, tiny_hf_config):
    pytest.importorskip("megatron.core")
    configs = {
        "qwen2": tiny_hf_config("qwen2"),
        "llama_tied": tiny_hf_config("llama", tie_word_embeddings=True),
        "qwen3_moe_raw_topk": tiny_hf_config("qwen3_moe"),  # transformers' default norm_topk_prob=False
        "qwen3_moe_normalized": tiny_hf_config("qwen3_moe", norm_topk_prob=True),  # as Qwen3-30B-A3B ships
        "qwen2_moe_shared_expert": tiny_hf_config("qwen2_moe"),
        "mixtral": tiny_hf_config("mixtral"),
    }
    _check(megatron_on_cpu.run(tmp_path, 1, configs, RANK_SCRIPT))


def test_two_tensor_parallel_ranks_match_the_hf_model(megatron_on_cpu, tmp_path, tiny_hf_config):
    pytest.importorskip("megatron.core")
    # (Qwen3's q/k norm gradients are summed over the ranks at the optimizer step: see the training strategy's test)
    report = megatron_on_cpu.run(
        tmp_path, 2, {"qwen2": tiny_hf_config("qwen2"), "qwen3_moe": tiny_hf_config("qwen3_moe")}, RANK_SCRIPT
    )
    _check(report)  # sequence parallel at tp=2 (each rank keeps half the tokens between layers), MoE in training mode


def test_the_forward_only_strategy_loads_gathers_and_exports_over_two_tensor_parallel_ranks(
    megatron_on_cpu, tmp_path, tiny_hf_config
):
    pytest.importorskip("megatron.core")
    configs = {"qwen2": tiny_hf_config("qwen2"), "qwen3_moe": tiny_hf_config("qwen3_moe", norm_topk_prob=True)}
    report = megatron_on_cpu.run(tmp_path, 2, configs, STRATEGY_SCRIPT)
    for name, entry in report.items():
        assert entry["logits"] <= LOGIT_TOLERANCE, (name, entry)
        assert entry["eval_mode"], name  # forward-only roles run in eval mode (MoE over TP ranks needs it)
        # weights untouched since loading: gathering and converting back must give them bit for bit
        assert entry["keys_equal"] and entry["gathered_exact"] and entry["export_exact"], (name, entry)


@pytest.mark.parametrize(
    ("world", "tp", "layout", "role"),
    [(2, 1, "padded", "ref"), (4, 2, "padded", "ref"), (2, 1, "packed", "ref"), (2, 1, "padded", "trainable")],
    ids=["pp2", "tp2xpp2", "pp2-packed", "pp2-trainable"],
)
def test_two_pipeline_stages_give_the_hf_log_probs_gradients_and_weights(
    megatron_on_cpu, tmp_path, tiny_hf_config, world, tp, layout, role
):
    """`pipeline_model_parallel_size=2` with an uneven first stage (1 of 3 layers), alone and with 2 tensor-parallel
    ranks per stage (4 ranks, megatron-core's rank order), run through megatron-core's 1F1B schedule over gloo: the
    worker-style bodies run on the last stage, every stage gets their log-probs, the gradients of every stage equal
    the HF model's, and the weights gather back exactly. `ref`: the forward-only strategy, its tied embedding's two
    gradients summed here; `trainable`: the policy's strategy (DDP, the optimizer a stand-in), whose
    `reduce_gradients` must sum them itself. `packed`: each micro-batch runs as one packed sequence (a repeated prompt
    packed once) through the stages."""
    pytest.importorskip("megatron.core")
    configs = {
        "qwen2": tiny_hf_config("qwen2", num_hidden_layers=3),
        "llama_tied": tiny_hf_config("llama", num_hidden_layers=3, tie_word_embeddings=True),
    }
    report = megatron_on_cpu.run(tmp_path, world, configs, PIPELINE_SCRIPT, extra=(str(tp), layout, role))
    for name, entry in report.items():
        assert entry["stage_layers"] == [0, 1], (name, entry)  # rank 0 is the first stage, holding 1 layer
        assert entry["forward_logprobs"] <= 1e-5 and entry["train_logprobs"] <= 1e-5, (name, entry)
        assert entry["grad_relative"] <= GRAD_TOLERANCE, (name, entry)
        assert entry["gathered_exact"] and entry["export_exact"], (name, entry)


def test_the_training_strategy_reduces_gradients_over_tensor_parallel_ranks(megatron_on_cpu, tmp_path, tiny_hf_config):
    """The trainable `MegatronStrategy` at tp=2 (its DDP wrapper and gradient buffers; only the distributed optimizer
    is a stand-in, see the script): after the micro-batches' backward passes, `reduce_gradients` (every optimizer
    step's first act) leaves in megatron's gradient buffers what the HF model gets. Qwen3's q/k norms are shared by
    heads the two ranks split, so each rank's backward gives only part of their gradient: without the
    tensor-parallel sum of `finalize_model_grads` they are off by more than their size."""
    pytest.importorskip("megatron.core")
    configs = {"qwen3": tiny_hf_config("qwen3"), "qwen2": tiny_hf_config("qwen2")}
    report = megatron_on_cpu.run(tmp_path, 2, configs, TRAINING_SCRIPT)
    for name, entry in report.items():
        assert entry["grad_relative"] <= GRAD_TOLERANCE, (name, entry)


@pytest.mark.parametrize(("world", "tp"), [(2, 2), (2, 1)], ids=["tp2", "pp2"])
def test_the_model_checkpoint_round_trips_through_dist_checkpointing(
    megatron_on_cpu, tmp_path, tiny_hf_config, world, tp
):
    """`save_checkpoint` / `load_checkpoint` of the model (the forward-only strategy: the optimizer's sharded state
    needs CUDA) with megatron-core's `dist_checkpointing` over 2 tensor-parallel ranks or 2 pipeline stages: a second,
    differently initialised model gets the first one's weights back exactly, and the saved `extra` with them."""
    pytest.importorskip("megatron.core")
    configs = {"qwen3": tiny_hf_config("qwen3"), "llama_tied": tiny_hf_config("llama", tie_word_embeddings=True)}
    report = megatron_on_cpu.run(tmp_path, world, configs, CHECKPOINT_SCRIPT, extra=(str(tp),))
    for name, entry in report.items():
        assert entry["differed_before"] and entry["equal_after"], (name, entry)
        assert entry["extra"] == {"step": 3}, (name, entry)
