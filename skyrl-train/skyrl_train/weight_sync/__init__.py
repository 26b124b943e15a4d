"""Weight sync: moving trained weights from the policy into the inference engines, by a strategy chosen by name.

Built-in strategies: `broadcast` (torch.distributed group; gloo on CPU, NCCL on GPU), `shm` (shared memory, one
machine, CPU), `cuda_ipc` (CUDA IPC, colocated GPUs), `checkpoint` (safetensors files) and `delta` (compressed
version deltas through shared or cloud storage). Importing this package registers them all. `auto` is resolved per
engine by `node_aware.connect_weight_sync` from where each engine runs (`locations.plan_weight_sync`: on the sender's
node (CPU) or GPU (CUDA) the local transport, elsewhere `broadcast`), with `MixedStrategy` when one run needs both.
"""

from skyrl_train.weight_sync import (  # noqa: F401 (importing the strategies registers them)
    base,
    broadcast,
    checkpoint,
    cuda_ipc,
    delta,
    locations,
    node_aware,
    shm,
    strategy,
)

# The public names are listed once, in each module's __all__.
from skyrl_train.weight_sync.base import *  # noqa: F403
from skyrl_train.weight_sync.locations import *  # noqa: F403
from skyrl_train.weight_sync.node_aware import *  # noqa: F403
from skyrl_train.weight_sync.strategy import *  # noqa: F403

__all__ = []
__all__ += base.__all__
__all__ += locations.__all__
__all__ += node_aware.__all__
__all__ += strategy.__all__
