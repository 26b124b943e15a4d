"""Weight sync without the gather (`workers.shard_send`): two FSDP2 policy ranks write their own rows into the `shm`
block, in many chunks, and two bf16 engine actors that started from another model must then hold exactly what the
general path (a gather on rank 0, cast to bf16) would have sent: before, after a plain sync, after a second one
(the plan is reused), after a sync inside the update call that changed the weights, after one whose final chunk
the engines installed later (at their next generate, when asked, or sent ahead through their local channels), and
after one-chunk syncs that presumed the agreed plan without any collective."""

import asyncio

import pytest
import torch

from skyrl_train.inference.ray_engine import create_engine_actors
from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer
from skyrl_train.utils.checksum import tensor_checksum
from skyrl_train.weight_sync import WeightSyncError, make_weight_sync_strategy
from skyrl_train.weight_sync.base import SendResult
from skyrl_train.workers import PolicyWorker, WorkerGroup
from skyrl_train.workers.shard_send import PresumedWrite, update_send

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENGINE_CFG = {
    "generator": {"inference_engine": {"backend": "hf", "model_dtype": "bfloat16"}},
    "trainer": {"device": "cpu"},
}
CHUNK_BYTES = 16 * 1024  # the size-1 model is ~0.2 MB in bf16: a sync moves many chunks


@pytest.fixture(scope="module")
def parts(ray_cluster, worker_config, tmp_path_factory):
    other = tmp_path_factory.mktemp("other_model")
    build_tiny_model(TinyModelSpec(size=1), seed=1).save_pretrained(other)
    save_tokenizer(build_char_tokenizer(), other)
    micro_batches = ("trainer.micro_train_batch_size_per_gpu=2", "trainer.micro_forward_batch_size_per_gpu=2")
    group = WorkerGroup("policy", PolicyWorker, 2, worker_config("trainer.policy.optimizer.lr=1e-2", *micro_batches))
    group.init_model(num_training_steps=4)
    engines = create_engine_actors(2, str(other), ENGINE_CFG)
    strategy = make_weight_sync_strategy("shm", chunk_bytes=CHUNK_BYTES, compute_checksums=True, timeout_s=60)
    asyncio.run(strategy.init(sender=group.actors[0], engines=engines))
    yield group, strategy
    group.shutdown()
    for engine in engines:
        engine.handle.__ray_terminate__.remote()


def _gathered_checksums(group):
    """What the general path sends: rank 0's gathered model cast to the engines' bf16."""
    return {name: tensor_checksum(tensor) for name, tensor in group.run_all("get_weights", "bfloat16")[0]}


def _update_syncing_to(run, version, batch):
    """`run` (a group's `run_sharded_each`, or its `_async` twin) with an on-policy update whose sync to `version`
    leaves its last chunk to the engines (`defer_weight_install`)."""
    arguments = {"advantages": torch.ones_like(batch.response_mask, dtype=torch.float32), "old_logprobs": None}
    return run(
        "train_mini_batches",
        [(batch, arguments)],
        on_policy=True,
        sync_weights_version=version,
        defer_weight_install=True,
    )


def _sent(results):
    """Rank 0's `SendResult` of an update that synced."""
    return update_send(results[-1].weight_sync)


def test_each_rank_writes_its_rows_and_the_engines_get_the_gathered_model(parts, make_batch):
    group, strategy = parts
    expected = _gathered_checksums(group)
    with pytest.raises(WeightSyncError, match="differ"):  # the engines hold another model so far
        asyncio.run(strategy.verify(expected))
    for version in (1, 2):  # the second sync reuses the agreed plan
        reports = group.run_all("sync_weights", version)
        assert reports[1] is None
        report = reports[0]
        assert report["writers"] == 2  # both ranks wrote: nothing was gathered
        assert report["version"] == version and report["served_versions"] == [version, version]
        assert asyncio.run(strategy.verify(expected)).num_checked > 0
        assert asyncio.run(strategy.verify(report["checksums"])).ok

    # a version the sender refuses fails on rank 0 without leaving rank 1 in a barrier: the general path raises
    # after both ranks left the gather, and the group keeps working
    with pytest.raises(Exception, match="version must grow"):
        group.run_all("sync_weights", 2)

    batch = make_batch(rows=4)
    arguments = {"advantages": torch.ones_like(batch.response_mask, dtype=torch.float32), "old_logprobs": None}
    results = group.run_sharded_each("train_mini_batches", [(batch, arguments)], on_policy=True, sync_weights_version=3)
    sent = [result for result in results[-1].weight_sync if result is not None]
    assert len(sent) == 1 and sent[0].writers == 2 and sent[0].version == 3 and sent[0].num_chunks > 1
    trained = _gathered_checksums(group)
    assert trained != expected  # the update changed the weights
    assert asyncio.run(strategy.verify(trained)).num_checked > 0


def test_a_deferred_final_chunk_is_installed_by_the_next_generate_or_on_request(parts, make_batch):
    """`defer_weight_install`: the engines are not asked to copy the last chunk; it waits in the block until an
    engine's next generate call brings it (that engine then serves the new version and samples with it), and
    `install_deferred` installs it in an engine that has not generated since."""
    group, strategy = parts
    engines = strategy.engines
    before = asyncio.run(engines[0].fetch_weight_version())
    version = before + 1
    sent = _sent(_update_syncing_to(group.run_sharded_each, version, make_batch(rows=4)))
    assert sent.num_chunks > 1 and sent.served_versions is None
    assert sent.deferred is not None and sent.deferred.final and sent.deferred.version == version
    # nothing told the engines the sync ended: both still serve the old version
    assert [asyncio.run(engine.fetch_weight_version()) for engine in engines] == [before, before]
    trained = _gathered_checksums(group)

    strategy.defer_install(version, sent.deferred)
    request = InferenceEngineInput(prompt_token_ids=[[1, 2, 3]], sampling_params=SamplingParams(max_tokens=2))
    output = asyncio.run(engines[0].generate(request))
    assert output.weight_version == version and engines[0].pending_weights is None
    assert engines[1].pending_weights is sent.deferred
    assert asyncio.run(engines[1].fetch_weight_version()) == before  # engine 1 has not generated

    asyncio.run(strategy.install_deferred())
    assert engines[1].pending_weights is None and engines[1].weight_version == version
    assert asyncio.run(strategy.verify(trained)).num_checked > 0  # both hold the whole trained model
    asyncio.run(strategy.install_deferred())  # nothing left to install: no call, no error


async def test_a_deferred_final_chunk_goes_ahead_through_the_local_channels(parts, make_batch):
    """Called in the event loop with the engines' local channels open, `defer_install` has each proxy send the chunk
    at once without waiting (`install_ahead`): both engines install it before any generate call, which then carries
    nothing and samples with it."""
    group, strategy = parts
    engines = strategy.engines
    request = InferenceEngineInput(prompt_token_ids=[[1, 2, 3]], sampling_params=SamplingParams(max_tokens=2))
    for engine in engines:  # opens each proxy's channel in this event loop
        await engine.generate(request)
    version = max(engine.weight_version for engine in engines) + 1
    sent = _sent(await _update_syncing_to(group.run_sharded_each_async, version, make_batch(rows=4)))
    assert sent.deferred is not None
    strategy.defer_install(version, sent.deferred)
    await asyncio.gather(*(task for engine in engines for task in engine._installing_ahead))
    assert [engine.pending_weights for engine in engines] == [None, None]
    assert [await engine.fetch_weight_version() for engine in engines] == [version, version]
    assert (await strategy.verify(_gathered_checksums(group))).num_checked > 0  # the whole trained model
    assert (await engines[1].generate(request)).weight_version == version


def _one_chunk_strategy(group, engines):
    """A new `shm` strategy whose chunks hold the whole model, set up on `group`'s rank 0 (a new sender: rank 0's
    next proposal is a new plan)."""
    strategy = make_weight_sync_strategy("shm", chunk_bytes=64 * 1024 * 1024, compute_checksums=False, timeout_s=60)
    asyncio.run(strategy.init(sender=group.actors[0], engines=engines))
    return strategy


def test_a_one_chunk_deferred_sync_presumes_the_agreed_plan_and_syncs_again_when_it_changed(parts, make_batch):
    """Once a one-chunk plan was agreed, an update's deferred sync runs no collective: every rank writes with that plan
    and reports it (`PresumedWrite`), and the engines get exactly the trained model. When rank 0's plan changed (a
    new sender), rank 0 writes nothing, `update_send` says so, and a sync of its own with the same version delivers."""
    group, strategy = parts
    engines = strategy.engines
    one_chunk = _one_chunk_strategy(group, engines)
    version = max(asyncio.run(engine.fetch_weight_version()) for engine in engines) + 1
    first = _update_syncing_to(group.run_sharded_each, version, make_batch(rows=4))[-1].weight_sync
    assert not any(isinstance(part, PresumedWrite) for part in first)  # no one-chunk plan agreed yet: agreed now
    assert update_send(first).num_chunks == 1
    one_chunk.defer_install(version, update_send(first).deferred)
    asyncio.run(one_chunk.install_deferred())

    parts_of_send = _update_syncing_to(group.run_sharded_each, version + 1, make_batch(rows=4))[-1].weight_sync
    assert [type(part) for part in parts_of_send] == [PresumedWrite, PresumedWrite]
    assert parts_of_send[0].plan_id == parts_of_send[1].plan_id > 0 and parts_of_send[1].result is None
    sent = update_send(parts_of_send)
    assert sent.version == version + 1 and sent.writers == 2 and sent.deferred is not None
    trained = _gathered_checksums(group)
    one_chunk.defer_install(version + 1, sent.deferred)
    asyncio.run(one_chunk.install_deferred())
    assert [asyncio.run(engine.fetch_weight_version()) for engine in engines] == [version + 1, version + 1]
    assert asyncio.run(one_chunk.verify(trained)).num_checked > 0  # both rank's rows, not a mix with older weights

    changed = _one_chunk_strategy(group, engines)  # rank 0's sender (and so its plan) is new; rank 1 cannot know
    parts_of_send = _update_syncing_to(group.run_sharded_each, version + 2, make_batch(rows=4))[-1].weight_sync
    assert parts_of_send[0] == PresumedWrite(0) and parts_of_send[1].plan_id > 0
    assert update_send(parts_of_send) is None  # nothing was sent: the version is still free
    assert [asyncio.run(engine.fetch_weight_version()) for engine in engines] == [version + 1, version + 1]
    report = group.run_all("sync_weights", version + 2)[0]
    assert report["served_versions"] == [version + 2, version + 2]
    assert asyncio.run(changed.verify(_gathered_checksums(group))).num_checked > 0


def test_update_send_refuses_parts_written_with_different_plans():
    """The driver's check of a presumed send: rank 0's result when all ranks wrote its plan, None when rank 0 wrote
    nothing, an error when the ranks' plans differ or only some presumed, and rank 0's result of an agreed send."""
    result = SendResult(version=3, num_tensors=1, num_bytes=4, num_chunks=1, seconds=0.0, writers=2)
    assert update_send([PresumedWrite(2, result), PresumedWrite(2)]) is result
    assert update_send([PresumedWrite(0), PresumedWrite(2)]) is None
    with pytest.raises(RuntimeError, match=r"ranks \[1\] wrote with another plan"):
        update_send([PresumedWrite(2, result), PresumedWrite(1)])
    with pytest.raises(RuntimeError, match="some ranks presumed"):
        update_send([PresumedWrite(2, result), None])
    assert update_send([result, None]) is result
    with pytest.raises(RuntimeError, match="no rank reported a send"):
        update_send([None, None])
