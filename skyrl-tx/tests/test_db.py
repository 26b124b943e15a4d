"""The database layer on SQLite and PostgreSQL: migrations, deduplication of resubmitted requests, restart
recovery, and concurrent writers (on SQLite without "database is locked")."""

import threading

import pytest
from sqlalchemy import inspect

from skyrl_tx.db import DONE, FAILED, PENDING, Base, Database, ModelRow
from skyrl_tx.futures import Conflict, FutureStore, Notifier


@pytest.fixture
def store(database_url):
    db = Database(database_url)
    db.create_schema()
    return FutureStore(db, Notifier())


def test_migrations_create_every_table_and_rerunning_them_changes_nothing(database_url):
    db = Database(database_url)
    db.create_schema()
    db.create_schema()
    tables = set(inspect(db.engine).get_table_names())
    assert {"sessions", "models", "futures", "sampling_sessions", "checkpoints", "alembic_version"} <= tables
    if database_url.startswith("sqlite"):
        with db.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    db.engine.dispose()


def test_migrations_build_exactly_the_orm_schema_and_downgrade_removes_it(database_url):
    from alembic import command
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from skyrl_tx.migrations import alembic_config

    db = Database(database_url)
    db.create_schema()
    with db.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []
    command.downgrade(alembic_config(db.engine), "base")
    assert set(inspect(db.engine).get_table_names()) == {"alembic_version"}
    db.engine.dispose()


def test_a_resubmission_returns_the_first_request_and_a_different_payload_conflicts(store):
    first, new = store.submit("optim_step", "owner", "m:train:0", 2, "hash-a")
    again, again_new = store.submit("optim_step", "owner", "m:train:0", 2, "hash-a")
    assert new and not again_new and again == first
    with pytest.raises(Conflict, match="seq_id 2 of m:train:0 was already submitted with a different payload"):
        store.submit("optim_step", "owner", "m:train:0", 2, "hash-b")
    other, _ = store.submit("optim_step", "owner", "m:train:0", 3, "hash-b")
    assert other != first


def test_a_restart_fails_what_was_in_flight_keeps_what_finished_and_marks_live_models_lost(store):
    done, _ = store.submit("forward", "owner", "m", 1, "a")
    store.complete(done, b'{"x": 1}', False)
    in_flight, _ = store.submit("forward", "owner", "m", 2, "b")
    with store.db.session() as s:
        s.add(ModelRow(model_id="m", session_id="s", owner="owner", base_model="b", lora_config={}, status="ready"))
    assert store.db.fail_unfinished("restarted") == 1
    assert store.get(done).status == DONE and store.get(done).result == b'{"x": 1}'
    failed = store.get(in_flight)
    assert (failed.status, failed.error, failed.error_category) == (FAILED, "restarted", "server")
    with store.db.session() as s:
        assert s.get(ModelRow, "m").status == "lost"


def test_many_threads_submitting_and_completing_at_once_lose_nothing(store):
    errors, ids = [], []
    lock = threading.Lock()

    def client(worker: int) -> None:
        try:
            for seq in range(25):
                request_id, _ = store.submit("sample", f"k{worker}", f"sampler{worker}", seq, str(seq))
                store.complete(request_id, b"{}", False)
                with lock:
                    ids.append(request_id)
        except Exception as exc:  # collected: a "database is locked" would land here
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(worker,)) for worker in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(set(ids)) == 16 * 25
    assert all(store.get(request_id).status == DONE for request_id in ids)
    assert store.pending_count() == 0 and PENDING == "pending"


def test_a_resubmission_of_a_request_the_server_failed_runs_again_and_of_one_the_user_failed_does_not(store):
    crashed, _ = store.submit("sample", "owner", "s:sample:0", 1, "a")
    refused, _ = store.submit("forward", "owner", "m", 1, "b")
    store.db.fail_unfinished("the server stopped")
    store.fail(refused, "WireError: bad tokens", "user")
    again, new = store.submit("sample", "owner", "s:sample:0", 1, "a")
    assert (again, new) == (crashed, True) and store.get(crashed).status == PENDING
    assert store.submit("sample", "owner", "s:sample:0", 1, "a") == (crashed, False)  # now pending: no second run
    assert store.submit("forward", "owner", "m", 1, "b") == (refused, False)  # bad input stays failed
    assert store.get(refused).status == FAILED


def test_admit_runs_only_when_something_new_would_be_stored(store):
    calls = []

    def admit() -> None:
        calls.append(1)

    first, _ = store.submit("optim_step", "owner", "m", 1, "a", admit)
    store.submit("optim_step", "owner", "m", 1, "a", admit)  # a resubmission: never refused by a quota
    assert len(calls) == 1

    def refuse() -> None:
        raise RuntimeError("quota")

    with pytest.raises(RuntimeError, match="quota"):
        store.submit("optim_step", "owner", "m", 2, "a", refuse)
    assert store.submit("optim_step", "owner", "m", 2, "a")[1]  # nothing was stored by the refused one


def test_a_notifier_event_lives_only_while_someone_polls():
    import asyncio

    notifier = Notifier()

    async def scenario() -> None:
        notifier.bind(asyncio.get_running_loop())
        with notifier.watch(7) as first, notifier.watch(7) as second:
            assert first is second and notifier.watched() == 1
            notifier.finished(7)
            await asyncio.wait_for(first.wait(), 5)
        with notifier.watch(8):
            pass
        assert notifier.watched() == 0

    asyncio.run(scenario())


def test_listings_page_through_one_keys_rows_newest_first_with_an_optional_filter(database_url):
    import datetime as dt

    db = Database(database_url)
    db.create_schema()
    with db.session() as s:
        for day, (owner, session_id) in enumerate([("a", "s1"), ("a", "s2"), ("a", "s1"), ("b", "s1")]):
            created = dt.datetime(2026, 1, 1 + day, tzinfo=dt.UTC)
            row = ModelRow(model_id=f"m{day}", session_id=session_id, owner=owner, base_model="tiny", lora_config={})
            row.user_metadata, row.created_at = {}, created
            s.add(row)
    for owner, model_id, name in [("a", "m0", "c0"), ("a", "m1", "c1"), ("a", "m0", "c2"), ("b", "m3", "c3")]:
        db.record_checkpoint(owner, model_id, "training", name, f"tinker://{model_id}/{name}", 1, {})

    def runs(*args, **kwargs):
        rows, total = db.runs_of(*args, **kwargs)
        return [row.model_id for row in rows], total

    def checkpoints(*args):
        rows, total = db.checkpoints_of(*args)
        return [row.name for row in rows], total

    assert runs("a", 10, 0) == (["m2", "m1", "m0"], 3)
    assert runs("a", 1, 1) == (["m1"], 3)
    assert runs("a", 10, 0, session_id="s1") == (["m2", "m0"], 2)
    assert checkpoints("a", None, 10, 0) == (["c2", "c1", "c0"], 3)
    assert checkpoints("a", "m0", 1, 0) == (["c2"], 2)
    db.engine.dispose()
