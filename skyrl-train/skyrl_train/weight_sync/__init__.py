"""Weight sync: moving trained weights from the policy into the inference engines, by a strategy chosen by name.

Built-in strategies: `broadcast` (torch.distributed group; gloo on CPU, NCCL on GPU), `shm` (shared memory, one
machine, CPU), `cuda_ipc` (CUDA IPC, colocated GPUs), `checkpoint` (safetensors files) and `delta` (compressed
version deltas through shared or cloud storage). Importing this package registers them all. `auto` is resolved per
engine by `node_aware.connect_weight_sync` from where each engine runs (`locations.plan_weight_sync`: on the sender's
node (CPU) or GPU (CUDA) the local transport, elsewhere `broadcast`), with `MixedStrategy` when one run needs both.
"""

from skyrl_train.weight_sync import (  # noqa: F401 (registers them)
    broadcast,
    checkpoint,
    cuda_ipc,
    delta,
    node_aware,
    shm,
)
from skyrl_train.weight_sync.base import (
    SendResult,
    VerifyReport,
    WeightChunk,
    WeightReceiver,
    WeightSender,
    WeightSyncError,
    WeightTarget,
)
from skyrl_train.weight_sync.locations import Location, check_backend, plan_weight_sync
from skyrl_train.weight_sync.node_aware import MixedStrategy, connect_auto_weight_sync, connect_weight_sync
from skyrl_train.weight_sync.strategy import (
    WEIGHT_SYNC_STRATEGIES,
    WeightSenderHost,
    WeightSyncStrategy,
    make_receiver,
    make_sender,
    make_weight_sync_strategy,
    register_weight_sync_strategy,
    resolve_strategy_name,
)

__all__ = [
    "Location",
    "MixedStrategy",
    "check_backend",
    "connect_auto_weight_sync",
    "connect_weight_sync",
    "plan_weight_sync",
    "SendResult",
    "VerifyReport",
    "WeightChunk",
    "WeightReceiver",
    "WeightSender",
    "WeightSyncError",
    "WeightTarget",
    "WEIGHT_SYNC_STRATEGIES",
    "WeightSenderHost",
    "WeightSyncStrategy",
    "make_receiver",
    "make_sender",
    "make_weight_sync_strategy",
    "register_weight_sync_strategy",
    "resolve_strategy_name",
]
