"""The weight-sync coordinator on a colocated GPU run, with Ray's per-bundle GPU assignment simulated without Ray or
GPUs (`RayGpuSim` in conftest) and the actors as stand-ins: defect M1 of the GPU audit (every engine was sent policy
rank 0's CUDA IPC handle, which only the engine on rank 0's GPU can open). Only names that predate the fix are
imported at the top, so this file runs, and fails, against the code before it."""

import pytest

from skyrl_train.config import SkyRLConfig
from skyrl_train.placement import plan_placement
from skyrl_train.weight_sync import WeightSyncError, connect_auto_weight_sync


class Where:
    """A process's node and visible GPUs (the first one is the GPU its tensors live on): the test's own record,
    independent of the code under test."""

    def __init__(self, node_id, gpus):
        self.node_id, self.gpus = node_id, tuple(gpus)
        self.device_gpu = self.gpus[0] if self.gpus else None

    def sees(self, node_id, gpu):
        return node_id == self.node_id and gpu in self.gpus

    def as_dict(self):
        return {"node_id": self.node_id, "gpus": list(self.gpus), "gpu": self.device_gpu}


def _colocated_cfg(gpus: int, nodes: int = 1, backend: str = "hf") -> SkyRLConfig:
    return SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cuda",
            "trainer.placement.colocate_all=true",
            f"trainer.placement.policy_num_nodes={nodes}",
            f"trainer.placement.policy_num_gpus_per_node={gpus}",
            f"generator.inference_engine.num_engines={gpus * nodes}",
            f"generator.inference_engine.backend={backend}",
        ],
        validate=False,
    )


def _placed(cfg, sim, monkeypatch, roles=("policy",)):
    """Plan the placement on the simulated cluster; where each policy rank and each engine actor runs."""
    sim.patch(monkeypatch)
    plan = plan_placement(cfg, list(roles))
    placement = cfg.trainer.placement
    counts = {
        "policy": placement.policy_num_gpus_per_node * placement.policy_num_nodes,
        "engine": cfg.generator.inference_engine.num_engines,
    }
    located = {}
    for role, count in counts.items():
        slot = plan.slots[role]
        located[role] = [
            Where(*sim.place(slot.placement_group, slot.bundles[index], slot.num_gpus)) for index in range(count)
        ]
    return located


class _Method:
    """A Ray actor method stand-in: `.remote(...)` is awaitable and runs `fn` (which records the call)."""

    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        async def call():
            return self.fn(*args, **kwargs)

        return call()


class _EngineHandle:
    """An engine actor as the weight-sync coordinator sees it: `engine_info`, `init_weight_receiver`."""

    def __init__(self, where: Where):
        self.where, self.strategy = where, None
        info = {**where.as_dict(), "dtype": "bfloat16", "device": "cuda", "weight_version": 0, "sync_ranks": 1}
        self.engine_info = _Method(lambda: dict(info))
        self.init_weight_receiver = _Method(self._receiver)

    def _receiver(self, name, info):
        self.strategy = name


class _Proxy:
    def __init__(self, handle):
        self.handle = handle


class _SenderHandle:
    """Policy rank 0 as the coordinator sees it (both the node-only and the location query)."""

    def __init__(self, where: Where):
        self.where, self.strategy = where, None
        self.weight_sender_node_id = _Method(lambda: where.node_id)
        self.weight_sender_location = _Method(lambda device="cpu": where.as_dict())
        self.init_weight_sender = _Method(self._sender)

    def _sender(self, name, info):
        self.strategy = name


def _reachable(engines, sender):
    """For every engine, whether the transport it got can carry the weights from `sender`: cuda_ipc only into a
    process that sees the sender's GPU; broadcast only between members on distinct GPUs (NCCL)."""
    broadcast_gpus = [(sender.where.node_id, sender.where.device_gpu)]
    verdicts = []
    for engine in engines:
        where = engine.handle.where
        if engine.handle.strategy == "cuda_ipc":
            verdicts.append(where.sees(sender.where.node_id, sender.where.device_gpu))
        else:
            own = [(where.node_id, gpu) for gpu in where.gpus]
            verdicts.append(not set(own) & set(broadcast_gpus))
            broadcast_gpus += own
    return verdicts


@pytest.mark.parametrize("gpus, nodes", [(2, 1), (4, 1), (2, 2)])
async def test_auto_sync_on_a_colocated_gpu_run_reaches_every_engine(gpus, nodes, ray_gpu_sim, monkeypatch):
    """M1: Ray shows engine i only GPU i; auto must give cuda_ipc only to engines that see rank 0's GPU."""
    sim = ray_gpu_sim({f"node{n}": gpus for n in range(nodes)})
    located = _placed(_colocated_cfg(gpus, nodes), sim, monkeypatch)
    # each actor sees one GPU, engine i the one of policy rank i (bundle i), and no two bundles share a GPU
    assert [where.gpus for where in located["engine"]] == [where.gpus for where in located["policy"]]
    assert len({(where.node_id, where.gpus) for where in located["engine"]}) == gpus * nodes
    sender = _SenderHandle(located["policy"][0])
    engines = [_Proxy(_EngineHandle(where)) for where in located["engine"]]
    strategy = await connect_auto_weight_sync(sender, engines, colocated=True, device="cuda", timeout_s=5)
    assert all(_reachable(engines, sender)), [engine.handle.strategy for engine in engines]
    assert engines[0].handle.strategy == "cuda_ipc"
    assert [engine.handle.strategy for engine in engines[1:]] == ["broadcast"] * (gpus * nodes - 1)
    assert sender.strategy == "mixed"
    assert strategy.part_names == {"cuda_ipc": [0], "broadcast": list(range(1, gpus * nodes))}


async def test_a_named_backend_is_checked_before_any_receiver_is_made(ray_gpu_sim, monkeypatch):
    located = _placed(_colocated_cfg(2), ray_gpu_sim({"node0": 2}), monkeypatch)
    sender = _SenderHandle(located["policy"][0])
    engines = [_Proxy(_EngineHandle(where)) for where in located["engine"]]
    from skyrl_train.weight_sync import connect_weight_sync

    with pytest.raises(WeightSyncError, match=r"cuda_ipc: engines \[1\]"):
        await connect_weight_sync("cuda_ipc", sender, engines, colocated=True, device="cuda")
    with pytest.raises(WeightSyncError, match=r"broadcast: engines \[0\]"):
        await connect_weight_sync("broadcast", sender, engines, colocated=True, device="cuda")
    assert [engine.handle.strategy for engine in engines] == [None, None]
