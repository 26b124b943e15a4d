"""StatefulDataLoader: seeded order, batch shapes, and a resumed run that sees exactly the uninterrupted batches."""

import json
import random

import numpy as np
import pytest

from skyrl_gym.envs.synthetic.generate import write_dataset
from skyrl_train.dataset import PromptDataset, StatefulDataLoader, epoch_permutation
from skyrl_train.models.tokenizer import build_char_tokenizer


def flat(batches):
    return [item for batch in batches for item in batch]


def test_same_seed_same_order_regardless_of_global_random_state():
    np.random.seed(1)
    random.seed(1)
    first = list(StatefulDataLoader(range(20), 5, seed=7).batches(3))
    np.random.seed(2)
    random.seed(2)
    second = list(StatefulDataLoader(range(20), 5, seed=7).batches(3))
    assert first == second


def test_each_epoch_is_a_new_permutation_of_all_samples_and_seeds_differ():
    loader = StatefulDataLoader(range(20), 5, seed=7)
    epochs = [flat(loader) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(20))
    assert epochs[0] != epochs[1] != epochs[2] and epochs[0] != list(range(20))
    assert flat(StatefulDataLoader(range(20), 5, seed=8)) != epochs[0]
    assert epochs[1] == epoch_permutation(20, seed=7, epoch=1)


def test_no_shuffle_keeps_dataset_order():
    loader = StatefulDataLoader(list("abcdefg"), 3, shuffle=False, drop_last=False)
    assert list(loader) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]


def test_drop_last_skips_the_partial_batch():
    # 10 samples in batches of 4: drop_last gives 2 batches (8 samples), otherwise 3 batches of 4, 4, 2
    kept = StatefulDataLoader(range(10), 4, seed=0)
    assert len(kept) == 2 and [len(batch) for batch in kept] == [4, 4]
    whole = StatefulDataLoader(range(10), 4, seed=0, drop_last=False)
    assert len(whole) == 3 and [len(batch) for batch in whole] == [4, 4, 2]


def test_iter_reads_the_rest_of_one_epoch_and_batches_counts_epochs():
    loader = StatefulDataLoader(range(12), 4, seed=0)
    assert len(list(loader)) == 3 and loader.epoch == 1 and loader.position == 0
    next(iter(loader))
    assert (loader.epoch, loader.position) == (1, 4)
    assert len(list(loader)) == 2 and loader.epoch == 2
    assert len(list(loader.batches(4))) == 6 and loader.epoch == 4


def test_position_advances_when_a_batch_is_handed_out_and_rolls_over_with_the_last_one():
    loader = StatefulDataLoader(range(8), 4, seed=0)
    stream = loader.batches()
    next(stream)
    assert (loader.epoch, loader.position) == (0, 4)
    next(stream)
    assert (loader.epoch, loader.position) == (1, 0)


@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("stop_after", [0, 1, 3, 4, 5, 9])
def test_resumed_run_sees_exactly_the_uninterrupted_batches(drop_last, stop_after):
    # 11 samples in batches of 3: 3 batches an epoch with drop_last, else 4; 3 epochs in all
    epochs = 3
    uninterrupted = list(StatefulDataLoader(range(11), 3, seed=5, drop_last=drop_last).batches(epochs))

    first = StatefulDataLoader(range(11), 3, seed=5, drop_last=drop_last)
    stream = first.batches(epochs)
    seen = [next(stream) for _ in range(stop_after)]
    saved = json.loads(json.dumps(first.state_dict()))  # a checkpoint holds plain values

    resumed = StatefulDataLoader(range(11), 3, seed=999, shuffle=True, drop_last=drop_last)
    resumed.load_state_dict(saved)
    assert seen + list(resumed.batches(epochs)) == uninterrupted


def test_resume_with_a_trainer_style_epoch_loop():
    """`for epoch in range(loader.epoch, E): for batch in loader` resumes mid-epoch without an extra epoch."""
    uninterrupted = []
    loader = StatefulDataLoader(range(9), 3, seed=1)
    for _ in range(loader.epoch, 2):
        uninterrupted.extend(loader)

    first = StatefulDataLoader(range(9), 3, seed=1)
    seen = list(first)  # the whole of epoch 0, then the run stops: the saved state already points at epoch 1
    resumed = StatefulDataLoader(range(9), 3, seed=1)
    resumed.load_state_dict(first.state_dict())
    for _ in range(resumed.epoch, 2):
        seen.extend(resumed)
    assert seen == uninterrupted


def test_resume_mid_epoch_with_prompt_dataset_items(tmp_path):
    paths = write_dataset(tmp_path, "arithmetic", train_size=10, test_size=2, difficulty=1, seed=0, fmt="jsonl")
    dataset = PromptDataset([paths["train"]], build_char_tokenizer(), max_prompt_length=64)
    uninterrupted = [[item["uid"] for item in batch] for batch in StatefulDataLoader(dataset, 4, seed=3).batches(2)]
    first = StatefulDataLoader(dataset, 4, seed=3)
    stream = first.batches(2)
    seen = [[item["uid"] for item in next(stream)]]
    resumed = StatefulDataLoader(dataset, 4, seed=3)
    resumed.load_state_dict(first.state_dict())
    seen += [[item["uid"] for item in batch] for batch in resumed.batches(2)]
    assert seen == uninterrupted and len(seen) == 4


def test_state_dict_holds_the_position_and_order_settings():
    loader = StatefulDataLoader(range(10), 4, seed=11, drop_last=False)
    next(iter(loader))
    assert loader.state_dict() == {
        "version": 1,
        "epoch": 0,
        "position": 4,
        "seed": 11,
        "shuffle": True,
        "num_samples": 10,
        "batch_size": 4,
        "drop_last": False,
    }


def test_state_for_other_data_or_a_malformed_state_is_refused():
    saved = StatefulDataLoader(range(10), 2).state_dict()
    with pytest.raises(ValueError, match="saved for a dataset of 10 samples, but this dataset has 12"):
        StatefulDataLoader(range(12), 2).load_state_dict(saved)
    with pytest.raises(ValueError, match=r"dataloader state is missing \['position'\]"):
        StatefulDataLoader(range(10), 2).load_state_dict({k: v for k, v in saved.items() if k != "position"})
    with pytest.raises(ValueError, match="dataloader state has version 9"):
        StatefulDataLoader(range(10), 2).load_state_dict({**saved, "version": 9})


def test_a_position_past_the_new_epoch_end_rolls_over():
    # saved without drop_last after 8 of 10 samples; resumed with drop_last=True, an epoch is 8 samples: epoch over
    saved = {**StatefulDataLoader(range(10), 4, drop_last=False).state_dict(), "position": 8}
    resumed = StatefulDataLoader(range(10), 4, drop_last=True)
    resumed.load_state_dict(saved)
    assert (resumed.epoch, resumed.position) == (1, 0)


@pytest.mark.parametrize(
    "dataset, batch_size, drop_last, message",
    [
        (range(4), 0, True, "batch_size must be a positive integer, got 0"),
        (range(4), True, True, "batch_size must be a positive integer, got True"),
        ([], 2, False, "dataset is empty"),
        (range(3), 4, True, "dataset has 3 samples, fewer than batch_size=4, and drop_last=True"),
    ],
)
def test_bad_arguments_are_named(dataset, batch_size, drop_last, message):
    with pytest.raises(ValueError, match=message):
        StatefulDataLoader(dataset, batch_size, drop_last=drop_last)


def test_a_small_dataset_without_drop_last_gives_one_short_batch():
    assert list(StatefulDataLoader(range(3), 4, shuffle=False, drop_last=False)) == [[0, 1, 2]]
