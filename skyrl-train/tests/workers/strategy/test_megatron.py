"""The Megatron strategy on CPU: start-up errors, and converted weights loading into megatron-core's real `GPTModel`
built over gloo (`use_cpu_initialization=True`) for tp=1 and tp=2. Forward/backward need CUDA: see
test_megatron_gpu.py."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from skyrl_train.config import SkyRLConfig
from skyrl_train.config.roles import MegatronConfig
from skyrl_train.models.megatron_convert import arch_from_hf_config, gather_state, megatron_to_hf
from skyrl_train.models.tiny import build_tiny_model
from skyrl_train.recipes.warm_start import WarmStartSettings
from skyrl_train.workers.distributed import free_port
from skyrl_train.workers.strategy import MegatronStrategy, strategy_class
from skyrl_train.workers.strategy.megatron_model import (
    check_rope_positions,
    megatron_attention_mask,
    require_megatron_runtime,
)


def test_without_megatron_core_the_start_up_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "megatron", None)  # what importlib reports when the package is absent
    with pytest.raises(RuntimeError, match=r"needs megatron-core: pip install -e './skyrl-train\[megatron\]'"):
        require_megatron_runtime(torch.device("cuda"))


def test_on_a_machine_without_cuda_the_strategy_refuses_to_start():
    pytest.importorskip("megatron.core")
    assert strategy_class("megatron") is MegatronStrategy
    section = SkyRLConfig.from_cli_overrides(["trainer.strategy=megatron"], validate=False).trainer.policy
    # the call BaseWorker.init_model makes on every rank
    with pytest.raises(RuntimeError, match=r"trainer.strategy=megatron needs CUDA GPUs .* device is 'cpu'"):
        strategy_class("megatron").from_section(section, torch.device("cpu"), None, False)


def test_param_dtype_sets_megatron_precision():
    from skyrl_train.config.roles import OptimizerConfig
    from skyrl_train.models.loading import resolve_dtype
    from skyrl_train.workers.strategy.megatron import megatron_optimizer_kwargs
    from skyrl_train.workers.strategy.megatron_model import transformer_config_kwargs

    arch = arch_from_hf_config(build_tiny_model(WarmStartSettings().model_spec).config)
    for name, bf16 in (("bfloat16", True), ("float32", False)):
        dtype = resolve_dtype(MegatronConfig(param_dtype=name).param_dtype)
        model_kwargs = transformer_config_kwargs(arch, dtype)
        optimizer_kwargs = megatron_optimizer_kwargs(OptimizerConfig(lr=0.5, adam_betas=[0.8, 0.9]), dtype)
        assert model_kwargs["params_dtype"] == dtype and model_kwargs["bf16"] is bf16
        assert optimizer_kwargs["bf16"] is bf16 and optimizer_kwargs["use_distributed_optimizer"] is True
        assert (optimizer_kwargs["lr"], optimizer_kwargs["adam_beta1"], optimizer_kwargs["adam_beta2"]) == (
            0.5,
            0.8,
            0.9,
        )
    assert model_kwargs["num_query_groups"] == arch.num_query_groups and model_kwargs["add_qkv_bias"] is True


def test_attention_mask_is_causal_and_masks_padding_keys():
    mask = megatron_attention_mask(torch.tensor([[0, 1, 1], [1, 1, 1]]))
    assert mask.shape == (2, 1, 3, 3) and mask.dtype == torch.bool
    allowed = ~mask[:, 0]
    assert allowed[1].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # row 0 starts with a padding token: no real query attends to it; the pad query keeps its diagonal
    assert allowed[0].tolist() == [[True, False, False], [False, True, False], [False, True, True]]


def test_positions_megatron_cannot_honour_are_refused():
    """megatron-core numbers positions 0..S-1 along a row: fine for one sequence per row with left or right padding,
    wrong for rows that restart their positions (packed sequences) or have padding between real tokens."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    check_rope_positions((mask.cumsum(-1) - 1).clamp(min=0), mask)  # what the workers pass: one run per row
    packed = torch.tensor([[0, 1, 2, 0, 1]])
    with pytest.raises(ValueError, match=r"rows \[0\] have real tokens whose positions are not one consecutive run"):
        check_rope_positions(packed, torch.ones(1, 5, dtype=torch.long))
    gap = torch.tensor([[1, 0, 1, 1, 1]])
    with pytest.raises(ValueError, match="packed sequences or padding between real tokens"):
        check_rope_positions((gap.cumsum(-1) - 1).clamp(min=0), gap)


def test_the_run_seed_reaches_the_model_parallel_rng_and_checkpoints_use_a_current_format(monkeypatch):
    """`trainer.seed` seeds megatron's RNG tracker (it was always 42); the optimizer checkpoint names a sharding
    type megatron-core's distributed optimizer implements and does not list as deprecated."""
    import inspect

    pytest.importorskip("megatron.core")
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    from skyrl_train.workers.strategy import megatron as megatron_strategy

    monkeypatch.setattr(megatron_strategy, "require_megatron_runtime", lambda device: None)  # no CUDA here
    section = SkyRLConfig.from_cli_overrides(["trainer.strategy=megatron"], validate=False).trainer.policy
    assert MegatronStrategy.from_section(section, torch.device("cpu"), None, False, seed=1234).seed == 1234
    from skyrl_train.workers.strategy.megatron_checkpoint import OPTIMIZER_CHECKPOINT_METADATA

    chosen = OPTIMIZER_CHECKPOINT_METADATA["distrib_optim_sharding_type"]
    doc = inspect.getdoc(DistributedOptimizer.sharded_state_dict)
    current, deprecated = doc.split("Deprecated sharding formats:")
    assert f"'{chosen}'" in current and f"'{chosen}'" not in deprecated
    assert f"sharding_type == '{chosen}'" in inspect.getsource(DistributedOptimizer.sharded_state_dict)


# ----- real GPTModel on CPU -------------------------------------------------------------------------------------


def _embedded_config():
    return build_tiny_model(WarmStartSettings().model_spec, seed=1).config


def _hf_state(config):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


RANK_SCRIPT = """
import sys, warnings
warnings.filterwarnings("ignore")
import torch
from transformers import AutoConfig
from megatron.core import parallel_state
from skyrl_train.models.megatron_convert import arch_from_hf_config, hf_to_megatron, shard_state, strip_extra_state
from skyrl_train.workers.strategy.megatron_model import build_gpt_model

folder, rank, tp, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=tp)
parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
config = AutoConfig.from_pretrained(folder)
arch = arch_from_hf_config(config)
_, model = build_gpt_model(arch, torch.float32, tensor_parallel_size=tp, use_cpu_initialization=True)
own = model.state_dict()
local = shard_state(hf_to_megatron(torch.load(f"{folder}/hf.pt", weights_only=True), arch, tp), tp, rank)
shapes = sorted((n, tuple(t.shape)) for n, t in strip_extra_state(own).items())
expected = sorted((n, tuple(t.shape)) for n, t in local.items())
local.update({n: v for n, v in own.items() if n.endswith("._extra_state")})
model.load_state_dict(local, strict=True)
state = {n: t.clone() for n, t in strip_extra_state(model.state_dict()).items()}
torch.save({"shapes": shapes, "expected": expected, "state": state}, f"{folder}/rank{rank}.pt")
parallel_state.destroy_model_parallel()
torch.distributed.destroy_process_group()
"""


# Two cases keep CI short (each is a subprocess of 20-35 s): tensor parallel on the embedded model, and MoE. The
# round trips of every architecture at every size are checked without megatron in tests/models/test_megatron_convert.py.
@pytest.mark.parametrize(("name", "tp"), [("embedded", 2), ("qwen3_moe", 1)])
def test_converted_weights_load_into_megatron_gpt_model(name, tp, tmp_path, tiny_hf_config):
    pytest.importorskip("megatron.core")
    config = _embedded_config() if name == "embedded" else tiny_hf_config(name)
    hf_state = _hf_state(config)
    config.save_pretrained(tmp_path)
    torch.save(hf_state, tmp_path / "hf.pt")
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT, encoding="utf-8")
    port = str(free_port())
    ranks = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path), str(rank), str(tp), port], stderr=subprocess.PIPE)
        for rank in range(tp)
    ]
    for rank, process in enumerate(ranks):
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, f"rank {rank}: {stderr.decode()[-2000:]}"
    results = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=True) for rank in range(tp)]
    for rank, result in enumerate(results):
        assert result["shapes"] == result["expected"], f"rank {rank}: names/shapes differ from megatron-core's"
    # What the real modules hold after loading, gathered over the TP ranks, converts back to the HF weights exactly
    back = megatron_to_hf(gather_state([[result["state"] for result in results]]), arch_from_hf_config(config))
    assert sorted(back) == sorted(hf_state)
    for key, tensor in hf_state.items():
        assert torch.equal(back[key], tensor), key


CHECKPOINT_SCRIPT = """
import pickle, sys, warnings
from pathlib import Path
warnings.filterwarnings("ignore")
import torch
from transformers import AutoConfig
from megatron.core import dist_checkpointing, parallel_state
from skyrl_train.models.megatron_convert import arch_from_hf_config
from skyrl_train.utils.pickle_guard import UnsafeCheckpointError, check_pickled_checkpoint
from skyrl_train.workers.strategy.megatron_model import build_gpt_model

# stand-ins for the two CUDA calls of Megatron's checkpoint writer (this machine has no GPU)
torch.cuda.synchronize = lambda *args, **kwargs: None
torch.cuda.current_device = lambda: "cpu"


class TouchOnLoad:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def main():
    folder, port = Path(sys.argv[1]), sys.argv[2]
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
    arch = arch_from_hf_config(AutoConfig.from_pretrained(folder))
    _, saved = build_gpt_model(arch, torch.float32, tensor_parallel_size=1, use_cpu_initialization=True)
    (folder / "ckpt").mkdir()
    dist_checkpointing.save(saved.sharded_state_dict(), str(folder / "ckpt"))
    check_pickled_checkpoint(folder / "ckpt")  # Megatron's own checkpoint passes
    torch.manual_seed(123)
    _, restored = build_gpt_model(arch, torch.float32, tensor_parallel_size=1, use_cpu_initialization=True)
    restored.load_state_dict(dist_checkpointing.load(restored.sharded_state_dict(), str(folder / "ckpt")))
    for name, tensor in saved.state_dict().items():
        if isinstance(tensor, torch.Tensor):
            assert torch.equal(restored.state_dict()[name], tensor), name
    marker = folder / "code-ran"
    (folder / "ckpt" / ".metadata").write_bytes(pickle.dumps(TouchOnLoad(marker)))
    try:
        check_pickled_checkpoint(folder / "ckpt")
    except UnsafeCheckpointError as exc:
        print("refused:", exc)
    assert not marker.exists()
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
"""


@pytest.mark.integration
@pytest.mark.slow
def test_a_megatron_checkpoint_passes_the_pickle_guard_and_a_planted_metadata_does_not(tmp_path):
    # Megatron's dist_checkpointing format pickles (security review #3); MegatronStrategy.load_checkpoint runs
    # check_pickled_checkpoint before dist_checkpointing.load. The strategy itself needs CUDA, so this checks the
    # guard on a real megatron-core checkpoint of a GPTModel built on CPU.
    pytest.importorskip("megatron.core")
    _embedded_config().save_pretrained(tmp_path)
    script = tmp_path / "checkpoint.py"
    script.write_text(CHECKPOINT_SCRIPT, encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, str(script), str(tmp_path), str(free_port())], capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "refused: " in completed.stdout and "names pathlib.Path.touch" in completed.stdout


def test_cpu_offload_settings_reach_megatron_cores_optimizer_config():
    """The role's offload settings go into megatron-core's real `OptimizerConfig` (built here on CPU); its
    `get_megatron_optimizer` then builds the `HybridDeviceOptimizer`, which needs CUDA (test_megatron_gpu.py)."""
    pytest.importorskip("megatron.core")
    from megatron.core.optimizer import OptimizerConfig as McoreOptimizerConfig

    from skyrl_train.config.roles import OptimizerConfig
    from skyrl_train.workers.strategy.megatron import megatron_optimizer_kwargs

    offload = MegatronConfig(
        optimizer_cpu_offload=True, optimizer_offload_fraction=0.75, overlap_cpu_optimizer_d2h_h2d=True
    )
    built = McoreOptimizerConfig(**megatron_optimizer_kwargs(OptimizerConfig(), torch.bfloat16, offload))
    assert (
        built.optimizer_cpu_offload and built.overlap_cpu_optimizer_d2h_h2d and not built.use_precision_aware_optimizer
    )
    assert built.optimizer_offload_fraction == 0.75 and built.decoupled_weight_decay  # AdamW: the hybrid one needs it
    # megatron-core checks Transformer Engine's version for the precision-aware optimizer, so on this machine (no
    # TE) only the keyword is checked
    aware = MegatronConfig(use_precision_aware_optimizer=True)
    assert megatron_optimizer_kwargs(OptimizerConfig(), torch.bfloat16, aware)["use_precision_aware_optimizer"] is True
    default = McoreOptimizerConfig(**megatron_optimizer_kwargs(OptimizerConfig(), torch.bfloat16))
    assert not default.optimizer_cpu_offload and default.optimizer_offload_fraction == 0.0


def test_with_cpu_offload_the_colocated_offload_moves_nothing():
    """megatron-core's hybrid optimizer places its own state; the sleep/wake offload leaves it alone."""
    strategy = object.__new__(MegatronStrategy)  # no CUDA here: only the offload methods are exercised
    strategy.megatron = MegatronConfig(optimizer_cpu_offload=True, optimizer_offload_fraction=1.0)
    strategy.optimizer = None  # would fail if the methods touched it
    strategy.optimizer_offloaded = False
    assert strategy.offload_optimizer() == 0 and strategy.reload_optimizer() == 0
    assert strategy.optimizer_offloaded is False


def test_sequence_parallelism_is_on_exactly_with_tensor_parallel_ranks(tiny_hf_config):
    from skyrl_train.workers.strategy.megatron_model import transformer_config_kwargs

    arch = arch_from_hf_config(tiny_hf_config("qwen3_moe"))
    assert transformer_config_kwargs(arch, torch.float32, tensor_parallel_size=2)["sequence_parallel"] is True
    assert transformer_config_kwargs(arch, torch.float32, tensor_parallel_size=1)["sequence_parallel"] is False


def test_calls_are_padded_to_the_sequence_multiple_and_packed_padding_is_its_own_segment():
    pytest.importorskip("megatron.core")
    from skyrl_train.models.varlen_attention import VarlenSegments
    from skyrl_train.workers.strategy.megatron_model import megatron_call_arguments

    input_ids = torch.arange(1, 8)[None]  # 7 tokens: rows of 3 and 4
    segments = VarlenSegments(np.array([0, 3]), np.array([3, 4]))
    positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3]])
    packed = megatron_call_arguments(input_ids, position_ids=positions, packed_segments=segments, sequence_multiple=4)
    assert packed["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6, 7, 0]]
    assert packed["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 0]]
    padded_segments = packed["packed_seq_params"].skyrl_segments
    assert padded_segments.query_lengths.tolist() == [3, 4, 1]
    rows = megatron_call_arguments(input_ids.repeat(2, 1), sequence_multiple=4)
    unchanged = megatron_call_arguments(input_ids.repeat(2, 1), sequence_multiple=1)
    assert rows["input_ids"].shape == (2, 8) and unchanged["input_ids"].shape == (2, 7)
    # the real tokens attend as before; the padding, on the right, is a key no real token reaches
    assert torch.equal(rows["attention_mask"][..., :7, :7], unchanged["attention_mask"])
    assert rows["attention_mask"][0, 0, :7, 7].all()


def test_qwen_moe_routing_weights_follow_norm_topk_prob(tiny_hf_config):
    from skyrl_train.workers.strategy.megatron_model import transformer_config_kwargs

    cases = [
        (tiny_hf_config("qwen3_moe"), True),  # transformers' default: raw softmax weights, softmax before the top k
        (tiny_hf_config("qwen3_moe", norm_topk_prob=True), False),
        (tiny_hf_config("qwen2_moe"), True),
        (tiny_hf_config("mixtral"), False),  # Mixtral always renormalises the top k
    ]
    for config, pre_softmax in cases:
        arch = arch_from_hf_config(config)
        assert transformer_config_kwargs(arch, torch.float32)["moe_router_pre_softmax"] is pre_softmax, config
