"""`PromptSource`: requeued prompts first, keys for drawn prompts, and what a checkpoint keeps."""

from skyrl_train.rollouts import PromptSource


class _Loader:
    """Batches of two uids, `epochs` passes over four prompts (what `StatefulDataLoader.next_batch` returns)."""

    def __init__(self):
        self.calls = 0

    def next_batch(self, max_epochs):
        self.calls += 1
        start = (self.calls - 1) * 2
        if start // 4 >= max_epochs:
            return None
        return [{"uid": str(start % 4 + i)} for i in range(2)]


def test_batches_come_from_the_loader_and_end_with_it():
    prompts = PromptSource(_Loader(), epochs=1, batch_size=2)
    first = prompts.draw_batch()
    assert [key for key, _ in first] == [0, 1] and [item["uid"] for _, item in first] == ["0", "1"]
    assert prompts.draw_batch() is not None
    assert prompts.draw_batch() is None


def test_used_prompts_leave_the_checkpoint_and_requeued_ones_come_first():
    prompts = PromptSource(_Loader(), epochs=2, batch_size=2)
    drawn = prompts.draw_batch()
    assert [item["uid"] for item in prompts.state()] == ["0", "1"]
    prompts.release(drawn[0][0], again=True)  # dropped for staleness: generated again first
    prompts.use([drawn[1][0]])
    assert prompts.used_uids == [["1"]]
    assert [item["uid"] for _, item in prompts.draw_batch()] == ["0", "2"]


def test_a_prompt_left_out_counts_as_used_by_the_next_step():
    prompts = PromptSource(_Loader(), epochs=1, batch_size=2)
    (a, _), (b, _) = prompts.draw_batch()
    prompts.release(a, again=False)
    prompts.use([b])
    assert prompts.used_uids == [["0", "1"]] and prompts.state() == []


def test_a_restored_checkpoint_is_drawn_before_the_loader():
    prompts = PromptSource(_Loader(), epochs=1, batch_size=2)
    prompts.restore([{"uid": "x"}])
    assert [item["uid"] for _, item in prompts.draw_batch()] == ["x", "0"]
    assert [item["uid"] for item in prompts.state()] == ["x", "0", "1"]  # "1" waits in the loader's batch
