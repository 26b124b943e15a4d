"""The compute queue: keys take turns (one key's thousand jobs do not starve another's one), each key's jobs keep
their order, sample batches take a bounded share per key, and a failed batch is rerun job by job so one key's bad
request fails only itself."""

from __future__ import annotations

import pytest

from skyrl_tx.compute import LoraHost, SampleJob
from skyrl_tx.compute_queue import BATCH_SHARE_TOKENS, ComputeQueue, Job
from skyrl_tx.db import DONE, FAILED, Database
from skyrl_tx.futures import FutureStore, Notifier
from skyrl_tx.wire import encode_sample_response


@pytest.fixture
def store(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'tx.db'}")
    db.create_schema()
    return FutureStore(db, Notifier())


def turns(queue: ComputeQueue) -> list[list[str]]:
    """Every turn the queue would run, as the kinds of its jobs (draining it without running anything)."""
    taken = []
    while queue.depth():
        taken.append([job.kind for job in queue.next_turn()])
    return taken


def test_a_key_with_one_job_waits_one_turn_behind_a_key_with_a_thousand(store):
    queue = ComputeQueue(store, lambda key, jobs: [])
    for index in range(1000):
        queue.put(Job(None, f"flood-{index}", owner="attacker"))
    queue.put(Job(None, "victim", owner="victim"))
    queue.put(Job(None, "victim-2", owner="victim"))
    assert queue.waiting("attacker") == 1000 and queue.waiting("victim") == 2 and queue.depth() == 1002
    order = [kinds[0] for kinds in turns(queue)]
    assert order[:4] == ["flood-0", "victim", "flood-1", "victim-2"]  # FIFO would have run it 1001st
    assert [kind for kind in order if kind.startswith("flood")] == [f"flood-{i}" for i in range(1000)]  # in order


def test_sample_batches_gather_every_keys_head_but_take_a_bounded_share_of_each(store):
    queue = ComputeQueue(store, lambda key, jobs: [])
    big = BATCH_SHARE_TOKENS // 2 + 1
    for index in range(3):
        queue.put(Job(None, f"a{index}", batch_key="base", owner="a", cost=big))
    queue.put(Job(None, "b-train", owner="b"))
    queue.put(Job(None, "b0", batch_key="base", owner="b", cost=1))
    for index in range(50):
        queue.put(Job(None, f"c{index}", batch_key="base", owner="c", cost=1))
    queue.put(Job(None, "c-other", batch_key="other", owner="c", cost=1))
    first = queue.next_turn()
    # a contributes one job (two would pass its share); b's head is not a sample, so b waits its turn; c's 50 fit
    assert [job.kind for job in first] == ["a0"] + [f"c{i}" for i in range(50)]
    assert turns(queue) == [["b-train"], ["c-other"], ["a1", "b0"], ["a2"]]


def test_a_failed_batch_is_rerun_job_by_job_so_each_request_gets_its_own_outcome(store, tiny_model_dir):
    host = LoraHost("org/tiny", tiny_model_dir)

    def run_batch(key, jobs):
        results = host.sample(None, [job.payload for job in jobs])
        return [(encode_sample_response(result.sequences), True) for result in results]

    def sample(seed) -> SampleJob:
        return SampleJob(
            prompt=[5, 6, 7], num_samples=2, max_tokens=3, temperature=1.0, top_k=-1, top_p=1.0, seed=seed, stop=None
        )

    # A payload that bypassed validation (the review's seed "x"): the engine raises for the whole batch.
    alice, bob, carol = (store.submit("sample", owner, None, None, owner)[0] for owner in ("alice", "bob", "carol"))
    queue = ComputeQueue(store, run_batch)
    queue.put(Job(alice, "sample", batch_key="base", payload=sample(1), owner="alice", cost=10))
    queue.put(Job(bob, "sample", batch_key="base", payload=sample("x"), owner="bob", cost=10))
    queue.put(Job(carol, "sample", batch_key="base", payload=sample(None), owner="carol", cost=10))
    batch = queue.next_turn()
    assert len(batch) == 3
    queue._run_group("base", batch)
    assert store.get(alice).status == DONE and store.get(carol).status == DONE
    assert store.get(bob).status == FAILED and "TypeError" in store.get(bob).error


def test_stop_ends_the_thread_and_leaves_what_was_queued(store):
    ran = []
    queue = ComputeQueue(store, lambda key, jobs: [])
    queue.start()
    queue.stop()
    assert not queue._thread.is_alive()
    queue.put(Job(None, "late", run=lambda: ran.append(1) or (b"", False), owner="k"))
    assert ran == [] and queue.waiting("k") == 1
