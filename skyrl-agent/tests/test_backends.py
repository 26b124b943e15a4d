"""One agent config, three real backends: the project's embedded model behind (1) skyrl_train's engine client in
this process, (2) our OpenAI-compatible endpoint on 127.0.0.1 driven by the `openai` client, (3) a skyrl-tx server
on 127.0.0.1 driven by the official `tinker` client. Greedy turns give the same tokens through all three."""

import asyncio
import math

import pytest
import torch

from skyrl_agent import AgentRunner, OpenAIBackend, SkyRLTrainBackend, TinkerBackend, ToolArithmeticTask

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVED = "skyrl/embedded-arithmetic"


@pytest.fixture(scope="module")
def embedded():
    """The embedded default model's folder (built and cached on first use, as skyrl-tx serves it)."""
    from skyrl_train.recipes.embedded import get_embedded_model
    from skyrl_train.recipes.warm_start import WarmStartSettings
    from skyrl_tx.cli import DEFAULT_MODEL_SETTINGS

    return str(get_embedded_model(WarmStartSettings(**DEFAULT_MODEL_SETTINGS)))


@pytest.fixture(scope="module")
def engine_and_tokenizer(embedded):
    from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
    from skyrl_train.models.loading import load_causal_lm, load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(embedded)
    client = InferenceEngineClient([HFInferenceEngine(load_causal_lm(embedded, dtype="float32"), tokenizer)])
    return client, tokenizer


def config(backend: str) -> dict:
    return {
        "generator": {
            "backend": backend,
            "max_iterations": 2,
            "max_prompt_length": 500,  # the embedded model reads 512 tokens
            "sampling_params": {"max_tokens": 12, "temperature": 1.0},
        },
        "dispatcher": {"type": "async_pipeline", "progress": False, "max_eval_parallel_agents": 2},
    }


def run_all(backend, tokenizer, batch):
    """The batch's greedy trajectories, run twice: each `run` is an event loop of its own, and an HTTP backend's
    connections from the first must not be reused in the second (they fail with "Event loop is closed")."""
    runner = AgentRunner(config(backend.name), backend, tokenizer)
    first = runner.run(batch, val_mode=True).trajectories
    again = runner.run(batch, val_mode=True).trajectories
    assert [t.response_ids for t in again] == [t.response_ids for t in first]
    return first


@pytest.fixture(scope="module")
def batch():
    return ToolArithmeticTask(digits=1, operations=1).build_dataset(3, seed=5, split="test")


@pytest.fixture(scope="module")
def through_engine(engine_and_tokenizer, batch):
    client, tokenizer = engine_and_tokenizer
    return run_all(SkyRLTrainBackend(client, tokenizer), tokenizer, batch)


SAME_ENGINE_LOGPROB_TOL = 1e-5
"""One engine behind both paths, but which requests share a forward pass depends on timing: a row's float32 logits
then come from matmuls of another shape (other blocking, other summation order), a few ulps apart (seen: 1.2e-7 at
-1.22). 1e-5 is ~100 ulps at these magnitudes, far below any real difference (another token, another model)."""


def check_same(reference, others, logprob_tol: float):
    for ours, theirs in zip(reference, others, strict=True):
        assert ours.prompt_ids == theirs.prompt_ids
        assert ours.response_ids == theirs.response_ids, (ours.summary(), theirs.summary())
        assert ours.loss_mask == theirs.loss_mask and ours.stop_reason == theirs.stop_reason
        assert theirs.exact_tokens and theirs.logprobs is not None
        for a, b in zip(ours.logprobs, theirs.logprobs):
            assert math.isclose(a, b, abs_tol=logprob_tol)


def test_the_engine_backend_gives_token_in_token_out_trajectories(through_engine, engine_and_tokenizer):
    _, tokenizer = engine_and_tokenizer
    for traj in through_engine:
        assert traj.turns >= 1 and traj.stop_reason in {"answer", "no_action", "length", "max_iterations"}
        generated = [lp for lp, m in zip(traj.logprobs, traj.loss_mask) if m]
        assert generated and all(lp <= 0.0 for lp in generated)
        assert tokenizer.decode(traj.prompt_ids).startswith("<|im_start|>system\nYou can call these tools")


def test_the_openai_backend_against_our_endpoint_matches_the_engine(engine_and_tokenizer, batch, through_engine):
    from skyrl_train.serving import create_app
    from skyrl_train.serving.background import BackgroundServer
    from skyrl_tx.local_server import free_port

    client, tokenizer = engine_and_tokenizer
    server = BackgroundServer(create_app(client, tokenizer, SERVED), "127.0.0.1", free_port()).start()
    try:
        backend = OpenAIBackend(server.url, SERVED, tokenizer)
        check_same(through_engine, run_all(backend, tokenizer, batch), logprob_tol=SAME_ENGINE_LOGPROB_TOL)
        check_runner_closes_only_its_own_backend(server.url, tokenizer, batch)
    finally:
        server.stop()


def check_runner_closes_only_its_own_backend(url, tokenizer, batch):
    """`from_config` builds the backend, so the runner closes it on leaving `async with`; a backend passed in is the
    caller's and stays open. Inside one event loop, as a caller with its own loop runs agents."""
    cfg = config("openai")
    cfg["generator"]["backend_args"] = {"base_url": url, "model": SERVED}

    async def scenario():
        async with AgentRunner.from_config(cfg, tokenizer) as runner:
            await runner.arun(batch[:1], val_mode=True)
            own = runner.backend.client
        passed = OpenAIBackend(url, SERVED, tokenizer)
        async with AgentRunner.from_config(cfg, tokenizer, backend=passed):
            await passed.generate(probe_turn(tokenizer))
        kept = passed.client
        assert own.is_closed() and not kept.is_closed()
        await passed.close()
        assert kept.is_closed()

    asyncio.run(scenario())


def probe_turn(tokenizer):
    from skyrl_agent.backends.base import TurnRequest
    from skyrl_train.inference.types import SamplingParams

    ids = tokenizer.encode("1+1=", add_special_tokens=False)
    return TurnRequest(ids, [], [], SamplingParams(max_tokens=2, temperature=0.0))


# The tinker SDK deprecates using the future `create_sampling_client` returns as the client (a FutureWarning, before
# the future stops being one): the backend must await it instead, so the warning fails the test.
@pytest.mark.filterwarnings("error::FutureWarning")
@pytest.mark.parametrize("given", ["config", "client"])
def test_the_tinker_backend_against_skyrl_tx_matches_the_engine(
    engine_and_tokenizer, batch, through_engine, tmp_path, given
):
    """`config`: `build_backend` from `generator.backend_args` (it gets the SDK's future of a SamplingClient);
    `client`: a SamplingClient the caller resolved."""
    tinker = pytest.importorskip("tinker")
    from skyrl_agent.backends import build_backend
    from skyrl_tx.local_server import LocalServer

    _, tokenizer = engine_and_tokenizer
    server = LocalServer(tmp_path)
    server.start()
    service = tinker.ServiceClient(base_url=server.url, api_key=server.api_key)
    try:
        if given == "config":
            args = {"base_url": server.url, "api_key": server.api_key, "base_model": SERVED}
            backend = build_backend("tinker", args, tokenizer)
        else:
            backend = TinkerBackend(service.create_sampling_client(base_model=SERVED).result(), tokenizer)
        check_same(through_engine, run_all(backend, tokenizer, batch), logprob_tol=1e-3)
        if given == "config":  # the backend's own ServiceClient: close() finishes its session (once)
            client = backend.sampling_client
            asyncio.run(backend.close())
            asyncio.run(backend.close())
            with pytest.raises(RuntimeError, match="closed"):  # the SDK released the session's client
                client.sample(
                    prompt=tinker.types.ModelInput.from_ints([1, 2]),
                    num_samples=1,
                    sampling_params=tinker.types.SamplingParams(max_tokens=1),
                ).result()
    finally:
        service.close("success")
        server.stop()
