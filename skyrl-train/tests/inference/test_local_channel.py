"""The engines' local channel (`inference.local_channel`): a real Unix socket served in this process's event loop,
checked for concurrent calls answered out of order, errors travelling back, and a closed or missing server failing the
calls that wait on it with `ChannelError`."""

import asyncio
import os
import stat

import pytest

from skyrl_train.inference.local_channel import ChannelClient, ChannelError, ChannelServer, RemoteCallError


class _Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("this exception does not pickle")


async def _handler(value, delay=0.0, fail=None):
    await asyncio.sleep(delay)
    if fail == "value":
        raise ValueError(f"bad value {value}")
    if fail == "unpicklable":
        raise _Unpicklable("kept as text")
    return {"echo": value, "delay": delay}


async def test_concurrent_calls_get_their_own_replies_in_any_order():
    server = ChannelServer(_handler)
    path = await server.start()
    client = ChannelClient(path, "test engine")
    try:
        # the first call's reply comes back last: replies are matched by request id, not by order
        replies = await asyncio.gather(*(client.call(i, 0.03 * (3 - i)) for i in range(4)))
        assert [reply["echo"] for reply in replies] == [0, 1, 2, 3]
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700  # only this user can connect
    finally:
        client.close()
        await server.close()
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))


async def test_errors_raised_by_the_handler_reach_the_caller():
    server = ChannelServer(_handler)
    client = ChannelClient(await server.start(), "test engine")
    try:
        with pytest.raises(ValueError, match="bad value 7"):
            await client.call(7, 0.0, "value")
        with pytest.raises(RemoteCallError, match="kept as text"):  # as its traceback's text
            await client.call(8, 0.0, "unpicklable")
        assert (await client.call(9))["echo"] == 9  # the connection still serves
    finally:
        client.close()
        await server.close()


async def test_a_server_that_closes_fails_the_waiting_call_and_the_next_ones():
    server = ChannelServer(_handler)
    client = ChannelClient(await server.start(), "engine 3")
    waiting = asyncio.ensure_future(client.call(1, 30.0))
    await asyncio.sleep(0.05)
    await server.close()
    with pytest.raises(ChannelError, match="engine 3"):
        await asyncio.wait_for(waiting, timeout=10)
    with pytest.raises(ChannelError, match="engine 3"):
        await client.call(2)
    assert not client.usable


async def test_a_missing_socket_is_a_channel_error(tmp_path):
    client = ChannelClient(str(tmp_path / "gone.sock"), "engine 5")
    with pytest.raises(ChannelError, match="cannot connect to engine 5"):
        await client.call(1)


async def test_concurrent_starts_listen_once():
    server = ChannelServer(_handler)
    first, second = await asyncio.gather(server.start(), server.start())
    client = ChannelClient(first, "test engine")
    try:
        assert first == second == await server.start()
        assert (await client.call(4))["echo"] == 4
    finally:
        client.close()
        await server.close()
