"""Which transport reaches each engine from where the sender and the engines run (`weight_sync.locations`)."""

import pytest

from skyrl_train.weight_sync import WeightSyncError
from skyrl_train.weight_sync.locations import Location, check_backend, current_gpu, plan_weight_sync, visible_gpus


def test_plan_per_engine_from_node_and_gpu():
    sender = Location("n0", ("0",), "0")
    engines = [Location("n0", ("0",)), Location("n0", ("1",)), Location("n1", ("0",)), Location("n0", None)]
    assert plan_weight_sync(sender, engines, colocated=True, device="cuda") == [
        ("cuda_ipc", [0, 3]),  # an unrestricted process (no CUDA_VISIBLE_DEVICES) sees every GPU of its node
        ("broadcast", [1, 2]),
    ]
    assert plan_weight_sync(sender, engines, colocated=True, device="cpu") == [("shm", [0, 1, 3]), ("broadcast", [2])]
    assert plan_weight_sync(sender, engines, colocated=False, device="cuda") == [("broadcast", [0, 1, 2, 3])]
    assert plan_weight_sync(Location("n2"), engines, colocated=True, device="cpu") == [("broadcast", [0, 1, 2, 3])]


def test_named_backends_that_cannot_reach_an_engine_are_refused_naming_auto():
    sender = Location("n0", ("0",), "0")
    two_gpus = [Location("n0", ("0",)), Location("n0", ("1",))]
    with pytest.raises(WeightSyncError, match=r"cuda_ipc: engines \[1\] cannot see GPU 0.*weight_sync_backend=auto"):
        check_backend("cuda_ipc", sender, two_gpus, "cuda")
    with pytest.raises(WeightSyncError, match=r"broadcast: engines \[0\] share GPU 0.*NCCL refuses"):
        check_backend("broadcast", sender, two_gpus, "cuda")
    with pytest.raises(WeightSyncError, match=r"shm: engines \[1\] run on another node"):
        check_backend("shm", sender, [Location("n0"), Location("n1")], "cpu")
    check_backend("cuda_ipc", sender, two_gpus[:1], "cuda")
    check_backend("broadcast", sender, two_gpus[1:], "cuda")
    check_backend("broadcast", Location("n0"), [Location("n0")], "cpu")  # gloo: ranks may share a machine


def test_visible_gpus_come_from_ray_then_the_environment():
    assert visible_gpus(["3"], {"CUDA_VISIBLE_DEVICES": "0,1"}) == ("3",)
    assert visible_gpus([], {"CUDA_VISIBLE_DEVICES": "2, 3"}) == ("2", "3")
    assert visible_gpus([], {}) is None
    assert current_gpu(("2", "3"), 1) == "3" and current_gpu(None, 1) == "1"
    with pytest.raises(WeightSyncError, match="current CUDA device 2 is not among the 2 GPU"):
        current_gpu(("2", "3"), 2)
    assert Location.from_dict({"node_id": "n"}) == Location("n", None, None)
    assert Location.from_dict(Location("n", ("1",), "1").as_dict()) == Location("n", ("1",), "1")
