"""`WeightSyncStrategy.confirm` from the versions the engines acknowledged a sync with: no round trip, and each
acknowledgement is matched to its engine (a `MixedStrategy` sender reports its parts one after the other)."""

import pytest

from skyrl_train.weight_sync import MixedStrategy, WeightSyncError, make_weight_sync_strategy


class EngineStandIn:
    """The two calls `confirm` makes on an engine proxy, recorded."""

    def __init__(self, serving: int) -> None:
        self.serving = serving
        self.noted: list[int] = []
        self.asked = 0

    async def fetch_weight_version(self) -> int:
        self.asked += 1
        return self.serving

    def note_weight_version(self, version: int) -> None:
        self.noted.append(version)


async def test_confirm_takes_the_acknowledged_versions_without_asking_the_engines():
    strategy = make_weight_sync_strategy("shm")
    strategy.engines = [EngineStandIn(3), EngineStandIn(3)]
    assert await strategy.confirm(4, served=[4, 4]) == [4, 4]
    assert [(engine.asked, engine.noted) for engine in strategy.engines] == [(0, [4]), (0, [4])]
    assert strategy.version == 4
    with pytest.raises(WeightSyncError, match=r"engines serve other versions: \{1: 3\}"):
        await strategy.confirm(5, served=[5, 3])
    assert await strategy.confirm(3) == [3, 3]  # nothing acknowledged: each engine is asked
    assert [engine.asked for engine in strategy.engines] == [1, 1]
    assert await strategy.confirm(3, served=[3]) == [3, 3]  # acknowledgements of fewer engines: asked again
    assert [engine.asked for engine in strategy.engines] == [2, 2]


async def test_mixed_confirm_maps_acknowledgements_part_by_part():
    strategy = MixedStrategy([("shm", [2, 0]), ("broadcast", [1])])
    strategy.engines = [EngineStandIn(0) for _ in range(3)]
    assert strategy.sender_engine_order() == [2, 0, 1]
    with pytest.raises(WeightSyncError, match=r"\{0: 6\}"):  # the second acknowledgement is engine 0's
        await strategy.confirm(7, served=[7, 6, 7])
    assert await strategy.confirm(7, served=[7, 7, 7]) == [7, 7, 7]
