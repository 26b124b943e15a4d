"""`MappedBlock`: the receiving side's mapping of a shared-memory block another process owns."""

import os
from multiprocessing import shared_memory

from skyrl_train.weight_sync.shm import MappedBlock


def test_maps_a_block_once_follows_a_new_name_and_never_unlinks():
    first = shared_memory.SharedMemory(create=True, size=8)
    second = shared_memory.SharedMemory(create=True, size=8)
    first.buf[0], second.buf[0] = 11, 22
    mapped = MappedBlock()
    try:
        block = mapped.get(first.name)
        assert block.buf[0] == 11
        assert mapped.get("/" + first.name.lstrip("/")) is block  # one block, with or without the leading slash
        assert mapped.get(second.name).buf[0] == 22  # the owner replaced its block: the new one is mapped
        mapped.close()
        assert mapped.block is None
        mapped.close()  # closing twice is harmless
        assert all(os.path.exists(f"/dev/shm/{owned.name.lstrip('/')}") for owned in (first, second))  # not unlinked
    finally:
        for owned in (first, second):  # the mapping unregistered the names from this process's resource tracker
            owned.close()
            os.unlink(f"/dev/shm/{owned.name.lstrip('/')}")
