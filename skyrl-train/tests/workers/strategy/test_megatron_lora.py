"""LoRA on the Megatron workers (`megatron_lora`), on CPU ranks over gloo against the peft model it came from.

The rank script wraps a Hugging Face model with peft as the workers do (`apply_lora`), gives its adapters non-zero B
matrices (peft starts B at zero, which would hide a misplaced adapter), and hands it to the trainable
`MegatronStrategy` (only the distributed optimizer is a stand-in, as in test_megatron_forward.py). Then, over 2
tensor-parallel ranks (with activation recomputation) or 2 pipeline stages (packed micro-batches):

- the adapters come back from `trainable_state_dict` (weight sync and exports) exactly as peft made them;
- the log-probs equal the peft model's, and with `disable_adapter` the base model's;
- after the backward passes and `reduce_gradients`, megatron's gradient buffers hold the peft model's adapter
  gradients, and no base weight has a gradient buffer (it is frozen);
- the adapter export is peft's format (its keys and values), and the merged export is peft's `merge_and_unload`;
- `dist_checkpointing` round-trips the adapters into a second, differently initialised model.

Two models: Qwen3 with every linear layer adapted, and tied Llama with a few projections only (fused layers whose
other parts get nothing).
"""

import json

import pytest
import torch

pytestmark = pytest.mark.integration

LORA_SCRIPT = (
    ("join", "cuda", "strategy", "schedule", "optimizer", "recompute"),
    r"""
import copy
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM
from megatron.core import parallel_state
from skyrl_train.config.roles import MegatronConfig, OptimizerConfig
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.models.lora import LoRASettings, apply_lora
from skyrl_train.models.lora_state import unnamed_adapter_key
from skyrl_train.models.packing import pack_rows
from skyrl_train.workers.strategy.megatron_lora import is_adapter_parameter

TARGETS = {"qwen3": "all-linear", "llama_tied": ["q_proj", "v_proj", "o_proj", "up_proj"]}
tp, pack, recompute = int(sys.argv[6]), sys.argv[7] == "packed", sys.argv[8] == "recompute"


def peft_model(name, seed):
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(f"{folder}/{name}")).float()
    peft = apply_lora(hf, LoRASettings(rank=4, alpha=8, target_modules=TARGETS[name]))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, param in peft.named_parameters():
            if "lora_B" in key:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return peft


def adapter_state(peft):
    return {key: value.detach().clone() for key, value in peft.named_parameters() if "lora_" in key}


report = {}
for name in cases:
    peft = peft_model(name, seed=1)
    config = peft.get_base_model().config
    expected_adapters = adapter_state(peft)
    megatron = MegatronConfig(
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=world // tp, param_dtype="float32"
    )
    strategy = megatron_strategy.MegatronStrategy(
        megatron, torch.device("cpu"), OptimizerConfig(), gradient_checkpointing=recompute
    )
    strategy.merge_adapters_on_export = True
    model = strategy.prepare(peft)
    generator = torch.Generator().manual_seed(2)
    entries = []
    for rows, width in ((3, 11), (2, 8)):
        input_ids = torch.randint(0, config.vocab_size, (rows, width), generator=generator)
        input_ids[-1, :4] = input_ids[-2, :4]  # a repeated prompt, as a GRPO group's samples have
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, :2] = 0
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        entries.append((input_ids, attention_mask, position_ids, torch.randn(rows, width - 4, generator=generator)))

    def body(entry, call):
        logprobs, _ = response_logprobs(call, *entry[:3], 4, share_prompts=pack, pack=pack)
        return (logprobs * entry[3]).sum(), logprobs.detach()

    def inputs(entry):
        if pack:
            return pack_rows(entry[0], entry[1], entry[2], 4, share_prompts=True).model_inputs()
        return {"input_ids": entry[0], "attention_mask": entry[1], "position_ids": entry[2]}

    def run(forward_only):
        return strategy.run_micro_batches(model, entries, body, forward_only=forward_only, inputs=inputs)

    entry_report = {}
    gathered = strategy.trainable_state_dict()
    if rank == 0:
        entry_report["adapters_exact"] = sorted(gathered) == sorted(expected_adapters) and all(
            torch.equal(gathered[key], expected_adapters[key]) for key in expected_adapters
        )
    with torch.no_grad():
        expected = [response_logprobs(peft, *entry[:3], 4)[0] for entry in entries]
        with peft.disable_adapter():
            expected_base = [response_logprobs(peft, *entry[:3], 4)[0] for entry in entries]
        got = run(True)
        with model.disable_adapter():
            got_base = run(True)
    entry_report["scale"] = max(e.abs().max().item() for e in expected)
    entry_report["adapter_moves"] = max((a - b).abs().max().item() for a, b in zip(expected, expected_base))
    entry_report["logprobs"] = max((a - b).abs().max().item() for a, b in zip(got, expected))
    entry_report["base_logprobs"] = max((a - b).abs().max().item() for a, b in zip(got_base, expected_base))

    got = run(False)
    entry_report["train_logprobs"] = max((a - b).abs().max().item() for a, b in zip(got, expected))
    strategy.reduce_gradients()
    gpt = strategy._gpt()
    entry_report["frozen_base"] = all(
        not param.requires_grad and not hasattr(param, "main_grad")
        for key, param in gpt.named_parameters()
        if not is_adapter_parameter(key)
    )
    sum((response_logprobs(peft, *entry[:3], 4)[0] * entry[3]).sum() for entry in entries).backward()
    with gradients_as_weights(gpt, is_adapter_parameter):  # the gradient buffers, gathered as the adapters are
        grads = strategy.trainable_state_dict()
    if rank == 0:
        relative = {}
        for key, param in peft.named_parameters():
            if "lora_" in key:
                relative[key] = (grads[key] - param.grad).abs().max().item() / max(param.grad.abs().max().item(), 1e-12)
        worst = max(relative, key=relative.get)
        entry_report["grad_worst"], entry_report["grad_relative"] = worst, relative[worst]
        entry_report["grad_count"] = [len(grads), len(relative)]

    strategy.save_hf_model(f"{folder}/{name}_export")
    if rank == 0:
        saved = load_file(f"{folder}/{name}_export/adapter_model.safetensors")
        entry_report["export_exact"] = sorted(saved) == sorted(unnamed_adapter_key(k) for k in expected_adapters) and all(
            torch.equal(saved[unnamed_adapter_key(key)], value) for key, value in expected_adapters.items()
        )
        merged = copy.deepcopy(peft).merge_and_unload().state_dict()
        reloaded = AutoModelForCausalLM.from_pretrained(f"{folder}/{name}_export/merged").float().state_dict()
        entry_report["merged_worst"] = max((reloaded[key] - merged[key]).abs().max().item() for key in merged)

    strategy.save_checkpoint(f"{folder}/{name}_ckpt")
    other = megatron_strategy.MegatronStrategy(megatron, torch.device("cpu"), None)
    other.prepare(peft_model(name, seed=3))
    before = other.trainable_state_dict()
    other.load_checkpoint(f"{folder}/{name}_ckpt")
    after = other.trainable_state_dict()
    if rank == 0:
        entry_report["checkpoint_differed"] = any(not torch.equal(before[k], expected_adapters[k]) for k in before)
        entry_report["checkpoint_exact"] = all(torch.equal(after[k], expected_adapters[k]) for k in expected_adapters)
    report[name] = entry_report
    parallel_state.destroy_model_parallel()
write_report(report)
dist.destroy_process_group()
""",
)

# float32 throughout; the two models sum the same products in different orders (fused layers, a different attention
# kernel), so log-probs agree to a few ulps of their size and gradients to about 1e-5 of each tensor's largest entry
# (test_megatron_forward.py). A misplaced adapter share moves log-probs by the adapters' effect (`adapter_moves`,
# ~1e-1 here) and gradients by their own size.
LOGPROB_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4


@pytest.mark.parametrize(
    ("tp", "packed", "recompute"), [(2, "padded", "recompute"), (1, "packed", "plain")], ids=["tp2", "pp2-packed"]
)
def test_lora_adapters_train_like_the_peft_model(megatron_on_cpu, tmp_path, tiny_hf_config, tp, packed, recompute):
    """A peft LoRA model on the Megatron strategy over 2 tensor-parallel ranks or 2 pipeline stages: its adapters,
    log-probs (with and without adapters), adapter gradients, exports and checkpoints are the peft model's."""
    pytest.importorskip("megatron.core")
    configs = {"qwen3": tiny_hf_config("qwen3"), "llama_tied": tiny_hf_config("llama", tie_word_embeddings=True)}
    report = megatron_on_cpu.run(tmp_path, 2, configs, LORA_SCRIPT, extra=(str(tp), packed, recompute))
    for name, entry in report.items():
        tolerance = LOGPROB_TOLERANCE * max(entry["scale"], 1.0)
        assert entry["adapter_moves"] > 100 * tolerance, (name, entry)  # the adapters matter in this test
        assert entry["adapters_exact"] and entry["export_exact"], (name, entry)
        assert entry["logprobs"] <= tolerance and entry["train_logprobs"] <= tolerance, (name, entry)
        assert entry["base_logprobs"] <= tolerance, (name, entry)
        assert entry["frozen_base"], (name, entry)
        assert entry["grad_count"][0] == entry["grad_count"][1] > 0, (name, entry)
        assert entry["grad_relative"] <= GRAD_TOLERANCE, (name, entry)
        assert entry["merged_worst"] <= 1e-5, (name, entry)
        assert entry["checkpoint_differed"] and entry["checkpoint_exact"], (name, entry)


def test_adapters_on_mixture_of_experts_layers_are_refused_by_name(tiny_hf_config):
    """peft's `all-linear` on a MoE model adapts every expert and the router, which get no adapters on the Megatron
    workers: `attach_adapters` refuses before it touches the model, naming the module and the way out."""
    from transformers import AutoModelForCausalLM

    from skyrl_train.models.lora import LoRASettings, apply_lora
    from skyrl_train.workers.strategy.megatron_lora import AdapterLayout, attach_adapters

    peft = apply_lora(AutoModelForCausalLM.from_config(tiny_hf_config("qwen3_moe")), LoRASettings(rank=2))
    adapters = {key: value for key, value in peft.state_dict().items() if "lora_" in key}
    layout = AdapterLayout(4, 2, 8, 1, 0, range(2))
    with pytest.raises(ValueError, match=r"peft put an adapter on 'model\.layers\.0\.mlp\.(experts|gate)"):
        attach_adapters(None, adapters, 16, layout, torch.float32)


POLICY_WORKER_SCRIPT = (
    ("cuda", "strategy", "optimizer"),
    r"""
# the worker joins its process group itself (gloo on CPU) and wraps the model with peft before the strategy
from skyrl_train.workers import PolicyWorker

batch = torch.load(f"{folder}/batch.pt", weights_only=False)
setting = json.loads(sys.argv[6])
worker = PolicyWorker("policy", rank, world, "127.0.0.1", setting["port"], setting["config"], num_threads=1)
worker.init_model()
logprobs = worker.forward(batch)
base_logprobs = worker.forward_base(batch)
weights = worker.get_weights(trainable_only=True)
torch.save((logprobs, base_logprobs), f"{folder}/logprobs_{rank}.pt")
write_report({
    "adapters": sorted(name for name, _ in weights),
    "sequence_parallel": bool(worker.strategy._gpt().config.sequence_parallel),
    "trainable": sorted(n for n, p in worker.strategy._gpt().named_parameters() if p.requires_grad)[:2],
})
from megatron.core import parallel_state

parallel_state.destroy_model_parallel()
dist.destroy_process_group()
""",
)


def test_the_policy_worker_trains_lora_on_megatron_over_two_tensor_parallel_ranks(
    megatron_on_cpu, tmp_path, worker_config, make_grouped_batch
):
    """The worker path: a `PolicyWorker` with `strategy=megatron`, tp=2 (sequence parallel) and `lora.rank=4` wraps
    the model with peft, the strategy moves the adapters onto megatron-core's layers, `forward` and `forward_base`
    (the reference policy of a LoRA run) give the HF model's log-probs (peft starts B at zero, so both are the base
    model's), and the weights a sync sends are the adapters alone, by peft name."""
    pytest.importorskip("megatron.core")
    from skyrl_train.models.logprobs import response_logprobs
    from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
    from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
    from skyrl_train.workers.distributed import free_port

    hf = build_tiny_model(TinyModelSpec(size=2), seed=0).float().eval()
    hf.save_pretrained(tmp_path / "model")
    save_tokenizer(build_char_tokenizer(), tmp_path / "model")
    batch = make_grouped_batch(groups=2, samples=4, seed=5)
    torch.save(batch, tmp_path / "batch.pt")
    config = worker_config(
        "trainer.strategy=megatron",
        f"trainer.policy.model.path={tmp_path / 'model'}",
        "trainer.policy.megatron.tensor_model_parallel_size=2",
        "trainer.policy.megatron.param_dtype=float32",
        "trainer.policy.model.lora.rank=4",
        "trainer.micro_forward_batch_size_per_gpu=4",
    )
    setting = {"port": free_port(), "config": config}
    report = megatron_on_cpu.run(tmp_path, 2, {}, POLICY_WORKER_SCRIPT, extra=(json.dumps(setting),))
    assert report["sequence_parallel"]
    assert report["adapters"] and all(".lora_A." in name or ".lora_B." in name for name in report["adapters"])
    assert all("_lora." in name for name in report["trainable"]), report
    with torch.no_grad():
        expected, _ = response_logprobs(
            hf, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width
        )
    expected = expected * batch.response_mask
    for rank in range(2):
        logprobs, base_logprobs = torch.load(tmp_path / f"logprobs_{rank}.pt")
        torch.testing.assert_close(logprobs, expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(base_logprobs, expected, atol=1e-5, rtol=0)
