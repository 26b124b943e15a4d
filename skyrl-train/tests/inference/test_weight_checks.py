"""The first phase of a weight update: names, shapes and dtypes checked against the model (or, for engines whose
parameters are not HF-shaped, such as vLLM's fused ones, against a meta-device HF model built from the config)."""

import pytest
import torch
from transformers import PretrainedConfig

from skyrl_train.inference.weight_checks import check_weight_update, reference_parameters
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model


def test_the_meta_reference_has_the_models_names_shapes_and_no_memory():
    model = build_tiny_model(TinyModelSpec(size=1), seed=0)
    reference = reference_parameters(model.config)
    real = dict(model.named_parameters(remove_duplicate=False))
    assert {name: tuple(t.shape) for name, t in real.items()} == {name: tuple(reference[name].shape) for name in real}
    assert all(tensor.device.type == "meta" for tensor in reference.values())
    check_weight_update(model.state_dict().items(), reference)  # a whole real state passes


def test_mismatches_are_named():
    reference = reference_parameters(build_tiny_model(TinyModelSpec(size=1), seed=0).config)
    norm = reference["model.norm.weight"]
    cases = [
        (
            ("model.nrom.weight", torch.ones(norm.shape)),
            "no parameter 'model.nrom.weight'; close names: \\['model.norm",
        ),
        (("model.norm.weight", torch.ones(3)), "'model.norm.weight' has shape \\(3,\\)"),
        (("model.norm.weight", torch.ones(norm.shape, dtype=torch.bool)), "has dtype torch.bool"),
        (("model.norm.weight", [1.0]), "is a list, expected a torch.Tensor"),
    ]
    for pair, message in cases:
        with pytest.raises(ValueError, match=message):
            check_weight_update([pair], reference)
    check_weight_update([("model.norm.weight", torch.ones(norm.shape, dtype=torch.bfloat16))], reference)


def test_an_architecture_transformers_cannot_build_has_no_reference(caplog):
    assert reference_parameters(PretrainedConfig(model_type="not-a-model")) is None
    assert "weight updates are not checked before loading" in caplog.text
