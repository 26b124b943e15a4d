"""`generator.http_endpoint`: an OpenAI-compatible endpoint over the run's engines while it trains. A client keeps
sending requests through two training steps: every one is answered, by weights of a whole version (requests wait
while a sync runs), and the versions it sees advance as the policy trains."""

import threading

import openai
import pytest

from skyrl_train.entrypoints.main_base import BasePPOExp
from skyrl_train.serving.listen import spare_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class EndpointExp(BasePPOExp):
    """Starts a client thread as soon as the endpoint listens; it asks until the endpoint goes away with the run."""

    def start_http_endpoint(self, client, tokenizer, trainer):
        endpoint = super().start_http_endpoint(client, tokenizer, trainer)
        self.seen, self.errors, self.done = [], [], threading.Event()
        self.asker = threading.Thread(target=self.ask, args=(endpoint.url,), daemon=True)
        self.asker.start()
        return endpoint

    def ask(self, url):
        api = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
        while not self.done.is_set():
            try:
                reply = api.chat.completions.create(
                    model="me/policy", messages=[{"role": "user", "content": "1+2="}], max_tokens=3
                )
                self.seen.append(reply.model_extra["weight_version"])
            except openai.APIConnectionError:
                return  # the endpoint stopped with the run (before the test could set `done`)
            except Exception as exc:  # noqa: BLE001 - the test reports what went wrong
                self.errors.append(repr(exc))


def test_the_endpoint_serves_whole_weight_versions_while_the_policy_trains(
    ray_cluster, make_config, spread_tiny_model_dir, data_dir, tmp_path
):
    port = spare_port()  # the endpoint binds it after the workers start: keep it out of bind(0)'s range
    cfg = make_config(
        spread_tiny_model_dir,
        data_dir,
        tmp_path,
        "generator.http_endpoint.enabled=true",
        f"generator.http_endpoint.port={port}",
        "generator.http_endpoint.host=127.0.0.1",
        "generator.http_endpoint.served_model_name=me/policy",
        "trainer.max_training_steps=2",
    )
    experiment = EndpointExp(cfg)
    try:
        result = experiment.run()
    finally:
        experiment.done.set()
    experiment.asker.join(timeout=60)
    assert result.global_step == 2
    assert experiment.errors == []
    assert len(experiment.seen) >= 2
    assert set(experiment.seen) <= {1, 2, 3}  # the initial sync, then one per step
    assert experiment.seen == sorted(experiment.seen)  # versions only move forward
    # with an endpoint the sync is a call of its own (in the update, requests would wait for the whole update)
    assert "weight_sync/in_update" not in result.history
    assert len(result.history["timing/weight_sync"]) == 2
    with pytest.raises(openai.APIConnectionError):  # stopped with the run
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0).models.list()
