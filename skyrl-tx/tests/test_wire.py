"""The wire formats against the official client's own (de)serializers: what it sends we decode, what we send it
decodes to the same values."""

import numpy as np
import pytest
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker.proto.response_conv import deserialize_forward_backward_output, deserialize_sample_response
from tinker.types import ForwardBackwardInput

from skyrl_tx.wire import (
    SampledRow,
    WireError,
    decode_forward_backward,
    encode_forward_backward_output,
    encode_sample_response,
)


def _request_bytes(data, loss_fn="cross_entropy", config=None):
    request = types.ForwardBackwardRequest(
        forward_backward_input=ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config),
        model_id="s:train:0",
        seq_id=3,
    )
    return forward_backward_request_to_proto(request).SerializeToString()


def test_a_client_request_decodes_to_its_tokens_inputs_and_config():
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints([5, 6, 7]),
            loss_fn_inputs={"target_tokens": [6, 7, 8], "weights": [0.0, 1.0, 0.5]},
        ),
        types.Datum(
            model_input=types.ModelInput.from_ints([9]),
            loss_fn_inputs={"target_tokens": [1], "logprobs": [-0.25], "advantages": [2.0]},
        ),
    ]
    call = decode_forward_backward(_request_bytes(data, "ppo", {"clip_low_threshold": 0.7}))
    assert (call.model_id, call.seq_id, call.loss_fn, call.forward_only) == ("s:train:0", 3, "ppo", False)
    assert call.loss_fn_config == {"clip_low_threshold": pytest.approx(0.7)}
    assert call.data[0].tokens == [5, 6, 7] and call.data[1].tokens == [9]
    np.testing.assert_array_equal(call.data[0].inputs["target_tokens"], [6, 7, 8])
    np.testing.assert_array_equal(call.data[0].inputs["weights"], np.float32([0.0, 1.0, 0.5]))
    assert call.data[1].inputs["advantages"].tolist() == [2.0]


def test_sparse_2d_inputs_are_densified():
    import torch

    weights = torch.zeros(2, 4)
    weights[1, 3] = 1.0
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(list(range(8))),
        loss_fn_inputs={"target_tokens": list(range(1, 9)), "weights": types.TensorData.from_torch_sparse(weights)},
    )
    call = decode_forward_backward(_request_bytes([datum]))
    assert call.data[0].inputs["weights"].tolist() == [0, 0, 0, 0, 0, 0, 0, 1.0]


def test_garbage_bodies_are_refused_naming_the_message():
    with pytest.raises(WireError, match="not a ForwardBackwardRequest"):
        decode_forward_backward(b"\xff\xff\xff\xff not a proto")


def test_outputs_decode_in_the_client_to_the_same_per_datum_arrays_and_metrics():
    outputs = [{"logprobs": np.float32([-1.0, -2.5])}, {"logprobs": np.float32([-0.5])}]
    decoded = deserialize_forward_backward_output(encode_forward_backward_output(outputs, {"loss:sum": 4.0}))
    assert decoded.metrics == {"loss:sum": 4.0}
    assert [o["logprobs"].tolist() for o in decoded.loss_fn_outputs] == [[-1.0, -2.5], [-0.5]]


def test_sample_responses_decode_with_tokens_logprobs_stop_reasons_and_prompt_logprobs():
    rows = [
        SampledRow([3, 4], [-0.1, -0.2], "stop", topk=[[(3, -0.1), (5, -2.0)], [(4, -0.2), (1, -3.0)]]),
        SampledRow([7], [-0.7], "length", topk=[[(7, -0.7), (2, -1.0)]]),
    ]
    decoded = deserialize_sample_response(encode_sample_response(rows, [None, -1.5, -0.25], None, 0))
    assert [s.tokens for s in decoded.sequences] == [[3, 4], [7]]
    assert [s.stop_reason for s in decoded.sequences] == ["stop", "length"]
    assert decoded.sequences[1].logprobs == pytest.approx([-0.7])
    assert decoded.prompt_logprobs[0] is None and decoded.prompt_logprobs[1:] == pytest.approx([-1.5, -0.25])


def _sparse_weights(rows: int, cols: int, crow: list[int], col: list[int], values: list[float]) -> bytes:
    """A one-datum request of `rows * cols` tokens whose `weights` is the given sparse CSR tensor."""
    from tinker.proto import tinker_public_pb2 as pb

    request = pb.ForwardBackwardRequest(model_id="s:train:0", seq_id=1, loss_fn="cross_entropy")
    datum = request.data.add()
    datum.model_input.add().encoded_text.tokens = np.arange(rows * cols, dtype="<i4").tobytes()
    weights = datum.loss_fn_inputs["weights"]
    weights.dtype = pb.DTYPE_FLOAT32
    weights.shape.extend([rows, cols])
    weights.sparse_csr.crow_indices = np.asarray(crow, dtype="<i8").tobytes()
    weights.sparse_csr.col_indices = np.asarray(col, dtype="<i8").tobytes()
    weights.sparse_csr.values = np.asarray(values, dtype="<f4").tobytes()
    return request.SerializeToString()


def test_more_datums_than_the_cap_are_refused_before_they_are_decoded():
    data = [types.Datum(model_input=types.ModelInput.from_ints([5]), loss_fn_inputs={"target_tokens": [6]})] * 9
    assert len(decode_forward_backward(_request_bytes(data), max_datums=9).data) == 9
    with pytest.raises(WireError, match=r"9 datums; this server takes at most 8 per request \(--max-datums\)"):
        decode_forward_backward(_request_bytes(data), max_datums=8)


def test_a_sparse_tensor_may_not_declare_more_values_than_its_datum_has_tokens():
    body = _sparse_weights(2, 4, [0, 0, 0], [], [])
    # the review's probe: a tiny body whose shape asks for a huge dense array (np.zeros(shape) before the fix)
    from tinker.proto import tinker_public_pb2 as pb

    request = pb.ForwardBackwardRequest()
    request.ParseFromString(body)
    del request.data[0].loss_fn_inputs["weights"].shape[:]
    request.data[0].loss_fn_inputs["weights"].shape.extend([2, 10**12])
    with pytest.raises(WireError, match=r"shape \[2, 1000000000000\] holds 2000000000000 values; .* at most 8"):
        decode_forward_backward(request.SerializeToString())


@pytest.mark.parametrize(
    "crow,col,values,message",
    [
        ([0, 2, 1], [0, 1], [1.0, 2.0], "sparse CSR crow_indices must rise from 0"),
        ([0, 1, 3], [0, 1], [1.0, 2.0], "sparse CSR crow_indices must rise from 0"),
        ([0, 1, 2], [0, 4], [1.0, 2.0], r"sparse CSR col_indices must be in \[0, 4\)"),
        ([0, 1, 2], [0], [1.0, 2.0], "malformed sparse CSR tensor"),
    ],
)
def test_malformed_sparse_indices_are_refused_naming_the_field(crow, col, values, message):
    with pytest.raises(WireError, match=r"data\[0\].loss_fn_inputs.weights: " + message):
        decode_forward_backward(_sparse_weights(2, 4, crow, col, values))


def test_the_vectorised_csr_decode_matches_the_dense_tensor_row_by_row():
    import torch

    rng = np.random.default_rng(0)
    dense = torch.from_numpy((rng.random((300, 7)) < 0.2) * rng.random((300, 7))).float()
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(list(range(300 * 7))),
        loss_fn_inputs={"target_tokens": list(range(300 * 7)), "weights": types.TensorData.from_torch_sparse(dense)},
    )
    assert datum.loss_fn_inputs["weights"].sparse_crow_indices is not None  # really sent as CSR
    decoded = decode_forward_backward(_request_bytes([datum])).data[0].inputs["weights"]
    np.testing.assert_array_equal(decoded, dense.numpy().reshape(-1))
