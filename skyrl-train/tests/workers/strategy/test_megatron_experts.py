"""Mixture-of-experts models trained over tensor-parallel ranks on the Megatron workers, on CPU ranks over gloo.

megatron-core trains a MoE model over tensor-parallel ranks only with sequence parallelism, which these workers turn on
whenever `tensor_model_parallel_size > 1`. Its experts then split by their own layout: `expert_tensor_parallel_size`
ranks split each expert's weights (null: the tensor-parallel size), and `expert_model_parallel_size` ranks hold
different experts, which may be the tensor-parallel ranks themselves (megatron-core's MoE parallel folding, as SkyRL's
Qwen3-30B-A3B scripts set it: tp=4, ep=8, etp=1).

The trainable `MegatronStrategy` (the distributed optimizer a stand-in, as in test_megatron_forward.py) runs here with
2 ranks that are one tensor-parallel group, either splitting each expert (etp=2) or holding 2 experts each whole
(ep=2, etp=1, the all-to-all token dispatcher; its side CUDA stream is one more stand-in). Against the HF model:
`full_state_dict` gathers the weights back exactly, the log-probs match, and after `reduce_gradients` megatron's
gradient buffers, gathered the same way, hold the HF model's gradients (the router's and the norms' summed over the
ranks, each of which saw half the tokens).
"""

import pytest

pytestmark = pytest.mark.integration

EXPERTS_SCRIPT = (
    ("join", "cuda", "strategy", "optimizer", "streams"),
    r"""
from transformers import AutoConfig, AutoModelForCausalLM
from megatron.core import parallel_state
from skyrl_train.config.roles import MegatronConfig, OptimizerConfig
from skyrl_train.models.logprobs import response_logprobs

ep, etp = int(sys.argv[6]), None if sys.argv[7] == "null" else int(sys.argv[7])
report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config).float()
    expected_state = {key: value.clone() for key, value in hf.state_dict().items()}
    megatron = MegatronConfig(
        tensor_model_parallel_size=world,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
        param_dtype="float32",
    )
    strategy = megatron_strategy.MegatronStrategy(megatron, torch.device("cpu"), OptimizerConfig())
    model = strategy.prepare(hf)
    gpt = strategy._gpt()
    entry = {"local_experts": len(gpt.decoder.layers[0].mlp.experts.local_experts)}
    gathered = strategy.full_state_dict()
    if rank == 0:
        entry["gathered_exact"] = sorted(gathered) == sorted(expected_state) and all(
            torch.equal(gathered[key], expected_state[key]) for key in expected_state
        )
    generator = torch.Generator().manual_seed(1)
    entries = []
    for rows, width in ((3, 11), (2, 8)):  # an odd width: padded to the tensor-parallel size
        input_ids = torch.randint(0, config.vocab_size, (rows, width), generator=generator)
        attention_mask = torch.ones_like(input_ids)
        attention_mask[0, :3] = 0
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        entries.append((input_ids, attention_mask, position_ids, torch.randn(rows, width - 4, generator=generator)))

    def body(entry, call):
        logprobs, _ = response_logprobs(call, *entry[:3], 4)
        return (logprobs * entry[3]).sum(), logprobs.detach()

    got = strategy.run_micro_batches(model, entries, body)
    strategy.reduce_gradients()
    expected = [response_logprobs(hf, *entry[:3], 4)[0] for entry in entries]
    sum((logprobs * entry[3]).sum() for logprobs, entry in zip(expected, entries)).backward()
    entry["logprobs"] = max((a - b.detach()).abs().max().item() for a, b in zip(got, expected))
    with gradients_as_weights(gpt):  # the gradient buffers, gathered as the weights are
        hf_grads = strategy.full_state_dict()
    if rank == 0:
        entry["grad_worst"], entry["grad_relative"] = worst_gradient(hf, hf_grads)
    report[name] = entry
    parallel_state.destroy_model_parallel()
write_report(report)
dist.destroy_process_group()
""",
)

# float32 on both sides, different summation orders (test_megatron_forward.py): log-probs agree to a few ulps,
# gradients to about 1e-5 of each tensor's largest entry. An expert on the wrong rank or a router gradient left
# partial is off by its own size.
LOGPROB_TOLERANCE = 1e-5
GRAD_TOLERANCE = 1e-4


@pytest.mark.parametrize(("ep", "etp"), [(2, "1"), (1, "null")], ids=["ep2-etp1-folded", "etp2"])
def test_moe_models_train_over_tensor_parallel_ranks(megatron_on_cpu, tmp_path, tiny_hf_config, ep, etp):
    """2 tensor-parallel ranks, the experts either spread over them whole (ep=2, etp=1) or each split over them
    (etp null: the tensor-parallel size): exact weights back, the HF log-probs and the HF gradients."""
    pytest.importorskip("megatron.core")
    configs = {
        "qwen3_moe": tiny_hf_config("qwen3_moe", norm_topk_prob=True),
        "qwen2_moe_shared_expert": tiny_hf_config("qwen2_moe"),
    }
    report = megatron_on_cpu.run(tmp_path, 2, configs, EXPERTS_SCRIPT, extra=(str(ep), etp))
    for name, entry in report.items():
        assert entry["local_experts"] == 4 // ep, (name, entry)
        assert entry["gathered_exact"], (name, entry)
        assert entry["logprobs"] <= LOGPROB_TOLERANCE * 10, (name, entry)
        assert entry["grad_relative"] <= GRAD_TOLERANCE, (name, entry)


ROUTER_SCRIPT = (
    ("join", "cuda", "strategy", "optimizer"),
    r"""
from transformers import AutoConfig, AutoModelForCausalLM
from megatron.core import parallel_state
from skyrl_train.config.roles import MegatronConfig, OptimizerConfig

report = {}
for name in cases:
    config = AutoConfig.from_pretrained(f"{folder}/{name}")
    entry = {}
    for label, score_function, expert_bias in (("null", None, None), ("model's", "softmax", False), ("sigmoid", "sigmoid", None), ("bias", None, True)):
        megatron = MegatronConfig(
            param_dtype="float32", moe_router_score_function=score_function, moe_router_enable_expert_bias=expert_bias
        )
        strategy = megatron_strategy.MegatronStrategy(megatron, torch.device("cpu"), OptimizerConfig())
        try:
            strategy.prepare(AutoModelForCausalLM.from_config(config).float())
            router_config = strategy._gpt().config
            entry[label] = [router_config.moe_router_score_function, router_config.moe_router_enable_expert_bias]
        except ValueError as error:
            entry[label] = str(error)
        if parallel_state.model_parallel_is_initialized():
            parallel_state.destroy_model_parallel()
    report[name] = entry
write_report(report)
dist.destroy_process_group()
""",
)


def test_router_settings_restate_the_models_router_or_are_refused_naming_both(
    megatron_on_cpu, tmp_path, tiny_hf_config
):
    """SkyRL's `moe_router_score_function` / `moe_router_enable_expert_bias`: null or the model's own value builds the
    model's router (softmax, no bias, for every MoE family mapped here); another value would train a router the
    engines' Hugging Face model does not have, and `prepare` refuses it naming the key, the model and its value. A
    dense model has no router to set."""
    pytest.importorskip("megatron.core")
    configs = {"qwen3_moe": tiny_hf_config("qwen3_moe"), "qwen3": tiny_hf_config("qwen3")}
    report = megatron_on_cpu.run(tmp_path, 1, configs, ROUTER_SCRIPT)
    moe = report["qwen3_moe"]
    assert moe["null"] == moe["model's"] == ["softmax", False]
    assert "moe_router_score_function=sigmoid: qwen3_moe's router runs with moe_router_score_function=softmax" in (
        moe["sigmoid"]
    )
    assert "is not supported here" in moe["sigmoid"]
    assert "moe_router_enable_expert_bias=True: qwen3_moe's router runs with moe_router_enable_expert_bias=False" in (
        moe["bias"]
    )
    dense = report["qwen3"]
    assert dense["null"] == ["softmax", False]  # megatron-core's defaults, unused without experts
    assert "qwen3 is a dense model, with no MoE router to set" in dense["model's"]
