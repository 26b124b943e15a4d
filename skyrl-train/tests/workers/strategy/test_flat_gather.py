"""The one-collective gather of a small FSDP2 model equals torch's per-parameter `get_model_state_dict`, also with
shards of uneven sizes (a 101-row vocabulary over 3 ranks leaves the last rank fewer rows)."""

import subprocess
import sys
import textwrap

import pytest
import torch

from skyrl_train.workers.strategy.flat_gather import flat_full_state_dict, shard_rows

RANKS_SCRIPT = textwrap.dedent("""
    import os, sys
    import torch
    import torch.distributed as dist

    def main(rank, world, vocab, port):
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
        from torch.distributed.fsdp import fully_shard
        from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
        from skyrl_train.workers.strategy.flat_gather import flat_full_state_dict

        model = build_tiny_model(TinyModelSpec(size=2, vocab_size=vocab), seed=0)
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        with torch.no_grad():  # make the shards differ from the initial weights
            for parameter in model.parameters():
                parameter.to_local().add_(0.5 * (rank + 1))
        expected = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        got = flat_full_state_dict(model)
        if rank == 0:
            assert got is not None and list(got) == list(expected), (list(got), list(expected))
            for name in expected:
                assert torch.equal(got[name], expected[name]), name
            print("EQUAL", len(got), flush=True)
        else:
            assert got == {}
        dist.destroy_process_group()

    if __name__ == "__main__":
        import torch.multiprocessing as mp
        world, vocab, port = (int(value) for value in sys.argv[1:])
        mp.spawn(main, args=(world, vocab, port), nprocs=world)
    """)


@pytest.mark.parametrize(("world", "vocab"), [(2, 128), (3, 101)])
def test_flat_gather_equals_the_per_parameter_gather(tmp_path, world, vocab):
    from skyrl_train.workers.distributed import free_port

    script = tmp_path / "ranks.py"
    script.write_text(RANKS_SCRIPT)
    run = subprocess.run(
        [sys.executable, str(script), str(world), str(vocab), str(free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "EQUAL" in run.stdout


def test_shard_rows_follow_torch_chunk():
    for rows in (0, 1, 5, 101, 128):
        for world in (1, 2, 3, 4):
            expected = [chunk.shape[0] for chunk in torch.arange(rows).chunk(world)] if rows else []
            expected += [0] * (world - len(expected))
            sizes = [stop - start for start, stop in (shard_rows(rows, world, rank) for rank in range(world))]
            assert sizes == expected, (rows, world)


def test_a_model_outside_a_process_group_takes_the_general_path():
    assert flat_full_state_dict(torch.nn.Linear(3, 2)) is None
