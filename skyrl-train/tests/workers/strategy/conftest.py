"""Fixtures of the strategy tests: megatron-core's model and strategies on CPU ranks over gloo (`megatron_on_cpu`)."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from skyrl_train.workers.distributed import free_port

RANK_ARGUMENTS = r"""
import contextlib, functools, json, sys, warnings
warnings.filterwarnings("ignore")
import torch
import torch.distributed as dist

folder, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cases = json.loads(sys.argv[5])


def write_report(report):
    # rank 0's report is what the test reads
    if rank == 0:
        with open(f"{folder}/report.json", "w") as handle:
            json.dump(report, handle)


def worst_gradient(hf, hf_grads):
    # (name, relative error) of the HF parameter whose .grad is furthest from hf_grads[name], relative to its size
    worst = {}
    for key, param in hf.named_parameters():
        worst[key] = (hf_grads[key] - param.grad).abs().max().item() / max(param.grad.abs().max().item(), 1e-12)
    name = max(worst, key=worst.get)
    return name, worst[name]


@contextlib.contextmanager
def gradients_as_weights(module, keep=lambda name: True):
    # within the block the parameters `keep` names hold their megatron gradient buffers (main_grad), so whatever
    # gathers the weights (full_state_dict, trainable_state_dict) gathers the gradients the same way
    saved = {}
    for name, param in module.named_parameters():
        if keep(name):
            saved[name] = param.data
            param.data = param.main_grad.detach().clone()
    try:
        yield
    finally:
        for name, param in module.named_parameters():
            if name in saved:
                param.data = saved[name]
"""

CUDA_CALL_STAND_INS = r"""
# --- stand-ins for the CUDA-only calls of megatron-core's forward (see test_megatron_forward.py's docstring) ---
torch.cuda.current_device = lambda: "cpu"
torch.cuda.synchronize = lambda *args, **kwargs: None
from megatron.core.tensor_parallel import random as megatron_random
megatron_random.CudaRNGStatesTracker.fork = contextlib.contextmanager(lambda self, name=None: (yield))


def hf_and_gpt(name, **options):
    # the HF model of case `name` (seed 0, float32), its arch, and this tensor-parallel rank's GPTModel holding its
    # weights (every rank of the world is one tensor-parallel group; `options`: build_gpt_model's, e.g. recompute)
    from transformers import AutoConfig, AutoModelForCausalLM
    from skyrl_train.models.megatron_convert import arch_from_hf_config, hf_to_megatron, shard_state
    from skyrl_train.workers.strategy.megatron_model import build_gpt_model

    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(f"{folder}/{name}")).float()
    arch = arch_from_hf_config(hf.config)
    _, gpt = build_gpt_model(arch, torch.float32, tensor_parallel_size=world, use_cpu_initialization=True, **options)
    local = shard_state(hf_to_megatron(hf.state_dict(), arch, world), world, rank)
    local.update({n: v for n, v in gpt.state_dict().items() if n.endswith("._extra_state")})
    gpt.load_state_dict(local, strict=True)
    return hf, arch, gpt
"""

JOIN = r"""
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
"""

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

RECOMPUTE_STAND_INS = r"""
# --- and of activation recomputation (gradient checkpointing), which saves and restores the CUDA RNG states
megatron_random._get_cuda_rng_state = lambda *args, **kwargs: torch.get_rng_state()
megatron_random._set_cuda_rng_state = lambda *args, **kwargs: None
megatron_random.CudaRNGStatesTracker.get_states = lambda self: {}
megatron_random.CudaRNGStatesTracker.set_states = lambda self, states: None
"""

OPTIMIZER_STAND_IN = r"""
# --- and the distributed optimizer, which cannot be built on CPU (it checks for torch.cuda.FloatTensor parameters):
# a trainable strategy's prepare gets None; its DDP wrapper, gradient buffers and gradient reduction are megatron-core's
import megatron.core.optimizer as megatron_optimizer
megatron_optimizer.get_megatron_optimizer = lambda *args, **kwargs: None
"""

STREAM_STAND_INS = r"""
# --- and of the all-to-all token dispatcher (expert parallelism), which copies its split sizes to the host on a side
# CUDA stream: one stand-in stream that is also the current one, so nothing is recorded across streams;
import types


class _OneStream:
    def wait_stream(self, other):
        pass

    def record_event(self):
        return types.SimpleNamespace(synchronize=lambda: None)


_ONE_STREAM = _OneStream()
torch.cuda.Stream = lambda *args, **kwargs: _ONE_STREAM
torch.cuda.current_stream = lambda *args, **kwargs: _ONE_STREAM
torch.cuda.stream = lambda stream: contextlib.nullcontext()
# its split sizes reach the host as numpy arrays from CUDA tensors; a CPU tensor would stay a tensor, which
# all_to_all_single does not take as split sizes
from megatron.core.transformer.moe import token_dispatcher as _token_dispatcher


def _split_sizes_to_host(tensor, as_numpy=False, record_stream=False):
    return tensor.numpy() if torch.is_tensor(tensor) and as_numpy else tensor


_token_dispatcher.maybe_move_tensor_to_cpu = _split_sizes_to_host
"""

PARTS = {
    "join": JOIN,
    "cuda": CUDA_CALL_STAND_INS,
    "strategy": STRATEGY_STAND_INS,
    "schedule": SCHEDULE_STAND_INS,
    "optimizer": OPTIMIZER_STAND_IN,
    "recompute": RECOMPUTE_STAND_INS,
    "streams": STREAM_STAND_INS,
}
"""The stand-in preambles a rank script can ask for by name, in the order given."""


LAUNCHER = """import runpy

if __name__ == "__main__":
    runpy.run_path({body!r}, run_name="rank_body")
"""


class MegatronOnCpu:
    """Runs a rank script on `world` CPU processes: its arguments (`folder rank world port cases *extra`), the
    stand-ins it names, then its body; the script writes `report.json` into `folder` (rank 0) for the test."""

    def run(
        self, folder: Path, world: int, configs: dict[str, Any], script: tuple[tuple[str, ...], str], extra=()
    ) -> dict:
        """Save `configs` (HF configs) under `folder`, run the script's ranks and return rank 0's report."""
        parts, body = script
        for name, config in configs.items():
            config.save_pretrained(folder / name)
        body_path = folder / "rank_body.py"
        body_path.write_text(RANK_ARGUMENTS + "".join(PARTS[part] for part in parts) + body, encoding="utf-8")
        # the body runs from a guarded launcher: megatron's checkpoint writer starts a multiprocessing manager, whose
        # spawned child imports the main module again
        path = folder / "rank.py"
        path.write_text(LAUNCHER.format(body=str(body_path)), encoding="utf-8")
        port, names = str(free_port()), json.dumps(sorted(configs))
        ranks = [
            subprocess.Popen(
                [sys.executable, str(path), str(folder), str(rank), str(world), port, names, *extra],
                stderr=subprocess.PIPE,
            )
            for rank in range(world)
        ]
        for rank, process in enumerate(ranks):
            _, stderr = process.communicate(timeout=600)
            assert process.returncode == 0, f"rank {rank}: {stderr.decode()[-3000:]}"
        return json.loads((folder / "report.json").read_text())


@pytest.fixture
def megatron_on_cpu() -> MegatronOnCpu:
    """Runs megatron-core rank scripts on CPU ranks (`MegatronOnCpu.run`)."""
    return MegatronOnCpu()
