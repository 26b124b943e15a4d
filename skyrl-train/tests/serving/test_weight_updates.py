"""The `/skyrl/*` weight-update routes: they need the weight-update token, load folders under one root only, and
apply a folder all or nothing (the review's probe: a folder with one bad tensor zeroed `model.norm.weight` and left
the version at 0)."""

import os

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import save_file

from skyrl_train.inference import HFInferenceEngine, InferenceEngineClient
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.serving import create_app
from skyrl_train.serving.access import ServingAccess

MODEL = "skyrl/tiny"
API_KEY, TOKEN = "sk-api", "sk-weights"
WEIGHTS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def served(tmp_path):
    """`(http, root, model)`: an app with weight updates over an hf engine, loading from `root` only."""
    root = tmp_path / "root"
    root.mkdir()
    model = build_tiny_model(TinyModelSpec(size=1), seed=0)
    tokenizer = build_char_tokenizer()
    client = InferenceEngineClient([HFInferenceEngine(model, tokenizer)])
    access = ServingAccess(api_key=API_KEY, weight_update_token=TOKEN, weight_update_root=str(root))
    with TestClient(create_app(client, tokenizer, MODEL, weight_updates=True, access=access)) as http:
        yield http, root, model


def _state(http) -> tuple[dict, list]:
    checksums = http.post("/skyrl/weights_checksum", json={"names": None}, headers=WEIGHTS).json()
    return checksums, http.get("/skyrl/info", headers=WEIGHTS).json()["weight_versions"]


def _greedy(http) -> list[int]:
    body = {"model": MODEL, "prompt": "12+34=", "max_tokens": 6, "temperature": 0}
    reply = http.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"})
    return reply.json()["choices"][0]["token_ids"]


def test_mounting_the_routes_without_a_token_is_refused():
    tokenizer = build_char_tokenizer()
    client = InferenceEngineClient([HFInferenceEngine(build_tiny_model(TinyModelSpec(size=1), seed=0), tokenizer)])
    with pytest.raises(ValueError, match="the weight-update routes need a token"):
        create_app(client, tokenizer, MODEL, weight_updates=True)


def test_the_routes_take_the_weight_update_token_and_nothing_else(served):
    http, _, _ = served
    assert http.get("/skyrl/info").status_code == 401
    assert http.get("/skyrl/info", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 401
    assert http.get("/skyrl/info", headers=WEIGHTS).json() == {
        "model": MODEL,
        "weight_versions": [0],
        "in_flight_weight_updates": False,
    }
    update = http.post("/skyrl/update_weights_from_disk", json={"path": "x", "version": 1})
    assert update.status_code == 401 and "needs the weight-update token" in update.json()["error"]["message"]
    assert http.get("/v1/models", headers=WEIGHTS).status_code == 401  # the token is not the API key
    assert http.get("/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200


def test_a_folder_with_one_bad_tensor_changes_no_weight_and_no_version(served):
    http, root, model = served
    before, answer = _state(http), _greedy(http)
    folder = root / "bad"
    folder.mkdir()
    save_file({"model.norm.weight": torch.zeros(model.config.hidden_size)}, str(folder / "a.safetensors"))
    save_file({"bogus.weight": torch.zeros(1)}, str(folder / "b.safetensors"))
    refused = http.post("/skyrl/update_weights_from_disk", json={"path": str(folder), "version": 1}, headers=WEIGHTS)
    assert refused.status_code == 400
    assert "the model has no parameter 'bogus.weight'" in refused.json()["error"]["message"]
    assert _state(http) == before and before[1] == [0]
    assert _greedy(http) == answer
    # the same folder without the bad file loads, and is served as version 1
    (folder / "b.safetensors").unlink()
    loaded = http.post("/skyrl/update_weights_from_disk", json={"path": "bad", "version": 1}, headers=WEIGHTS)
    assert loaded.json() == {"weight_versions": [1], "num_tensors": 1}
    checksums, versions = _state(http)
    assert checksums["model.norm.weight"] == 0.0 and versions == [1]


def test_folders_outside_the_root_are_refused(served, tmp_path):
    http, root, model = served
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    save_file({"model.norm.weight": torch.zeros(model.config.hidden_size)}, str(outside / "model.safetensors"))
    linked = root / "linked"
    linked.mkdir()
    os.symlink(outside / "model.safetensors", linked / "model.safetensors")
    before = _state(http)
    for path in (str(outside), "../elsewhere", str(root / ".." / "elsewhere"), "linked"):
        refused = http.post("/skyrl/update_weights_from_disk", json={"path": path, "version": 1}, headers=WEIGHTS)
        assert refused.status_code == 403, path
        message = refused.json()["error"]["message"]
        assert f"is outside the folder this server loads weights from ({root.resolve()})" in message
    assert _state(http) == before
    missing = http.post("/skyrl/update_weights_from_disk", json={"path": "none", "version": 1}, headers=WEIGHTS)
    assert missing.status_code == 400 and "is not a folder holding *.safetensors files" in missing.text
    (root / "torn").mkdir()
    (root / "torn" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    torn = http.post("/skyrl/update_weights_from_disk", json={"path": "torn", "version": 1}, headers=WEIGHTS)
    assert torn.status_code == 400 and "model.safetensors is not a readable safetensors file" in torn.text
    nul = http.post("/skyrl/update_weights_from_disk", json={"path": "a\u0000b", "version": 1}, headers=WEIGHTS)
    assert nul.status_code == 400 and "is not a usable path" in nul.text
    assert _state(http) == before
