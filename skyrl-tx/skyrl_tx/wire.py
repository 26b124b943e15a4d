"""The Tinker wire formats: decode `ForwardBackwardRequest` protobufs, encode `ForwardBackwardOutput` and
`SampleResponse` protobufs, and read JSON `TensorData`.

The message schema is the one the official client ships compiled (`tinker.proto.tinker_public_pb2`), so both
sides agree on every field number. Packed arrays are little-endian raw bytes. Bad input raises `WireError`
naming the datum and field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from tinker.proto import tinker_public_pb2 as pb

_DTYPES = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64, pb.DTYPE_INT32: np.int32}


class WireError(ValueError):
    """A request body that does not decode or does not fit the model (reported to the client as a user error)."""


@dataclass
class TrainDatum:
    """One datum of a forward/backward call: input tokens and per-token loss inputs (flat arrays)."""

    tokens: list[int]
    inputs: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ForwardBackwardCall:
    """A decoded `ForwardBackwardRequest`."""

    model_id: str
    seq_id: int
    data: list[TrainDatum]
    loss_fn: str
    loss_fn_config: dict[str, Any]
    forward_only: bool


def _tensor(message: Any, where: str, max_elements: int) -> np.ndarray:
    """A `TensorData` as a flat array. Its declared shape may hold at most `max_elements` values (a sparse tensor's
    dense size is not bounded by the bytes sent), and a sparse CSR tensor's indices must fit its shape."""
    dtype = _DTYPES.get(message.dtype)
    if dtype is None:
        raise WireError(f"{where}: unsupported tensor dtype {message.dtype} (expected float32 or int64)")
    shape = [int(size) for size in message.shape]
    if any(size < 0 for size in shape):
        raise WireError(f"{where}: negative size in shape {shape}")
    elements = int(np.prod(shape, dtype=object)) if shape else None
    if elements is not None and elements > max_elements:
        raise WireError(f"{where}: shape {shape} holds {elements} values; this datum takes at most {max_elements}")
    if message.HasField("sparse_csr"):
        return _dense_from_csr(message.sparse_csr, dtype, shape, where)
    raw = message.dense
    if len(raw) % np.dtype(dtype).itemsize:
        raise WireError(f"{where}: {len(raw)} bytes is not a whole number of {np.dtype(dtype).name} values")
    values = np.frombuffer(raw, dtype=dtype)
    if elements is not None and elements != values.size:
        raise WireError(f"{where}: shape {shape} does not match {values.size} values")
    if values.size > max_elements:
        raise WireError(f"{where}: {values.size} values; this datum takes at most {max_elements}")
    return values


def _dense_from_csr(csr: Any, dtype: Any, shape: list[int], where: str) -> np.ndarray:
    """The flat dense array of a 2-D sparse CSR tensor (one vectorised scatter; the shape was bounded already)."""
    values = np.frombuffer(csr.values, dtype=dtype)
    crow = np.frombuffer(csr.crow_indices, dtype=np.int64)
    cols = np.frombuffer(csr.col_indices, dtype=np.int64)
    if len(shape) != 2 or len(crow) != shape[0] + 1 or len(cols) != len(values):
        raise WireError(f"{where}: malformed sparse CSR tensor (shape {shape})")
    counts = np.diff(crow)
    if crow[0] != 0 or crow[-1] != len(values) or (counts < 0).any():
        raise WireError(f"{where}: sparse CSR crow_indices must rise from 0 to the number of values")
    if len(cols) and (cols.min() < 0 or cols.max() >= shape[1]):
        raise WireError(f"{where}: sparse CSR col_indices must be in [0, {shape[1]})")
    dense = np.zeros(shape, dtype=dtype)
    dense[np.repeat(np.arange(shape[0]), counts), cols] = values
    return dense.reshape(-1)


def decode_forward_backward(body: bytes, max_datums: Optional[int] = None) -> ForwardBackwardCall:
    """Parse a `ForwardBackwardRequest` body; raises `WireError` on malformed bytes, unsupported chunks, more than
    `max_datums` datums, or a loss input holding more values than its datum has tokens."""
    request = pb.ForwardBackwardRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # protobuf raises DecodeError (a plain Exception subclass)
        raise WireError(f"forward_backward body is not a ForwardBackwardRequest protobuf: {exc}") from None
    if max_datums is not None and len(request.data) > max_datums:
        raise WireError(
            f"forward_backward: {len(request.data)} datums; this server takes at most {max_datums} per request "
            "(--max-datums)"
        )
    data = []
    for index, datum in enumerate(request.data):
        chunks = []
        for chunk in datum.model_input:
            kind = chunk.WhichOneof("chunk") if hasattr(chunk, "WhichOneof") else None
            if kind not in (None, "encoded_text"):
                raise WireError(f"data[{index}].model_input: {kind} chunks are not supported (text tokens only)")
            raw = chunk.encoded_text.tokens
            if len(raw) % 4:
                raise WireError(f"data[{index}].model_input: {len(raw)} bytes is not a whole number of int32 tokens")
            chunks.append(np.frombuffer(raw, dtype="<i4"))
        tokens = np.concatenate(chunks).tolist() if chunks else []
        inputs = {
            name: _tensor(tensor, f"data[{index}].loss_fn_inputs.{name}", max(1, len(tokens)))
            for name, tensor in datum.loss_fn_inputs.items()
        }
        data.append(TrainDatum(tokens=tokens, inputs=inputs))
    config: dict[str, Any] = dict(request.loss_fn_config)
    for name, value in request.loss_fn_config_v2.items():
        config[name] = value.text if value.WhichOneof("value") == "text" else value.number
    return ForwardBackwardCall(
        model_id=request.model_id,
        seq_id=request.seq_id,
        data=data,
        loss_fn=request.loss_fn,
        loss_fn_config=config,
        forward_only=request.forward_only,
    )


def encode_forward_backward_output(outputs: list[dict[str, np.ndarray]], metrics: dict[str, float]) -> bytes:
    """A `ForwardBackwardOutput` with one `ArrayRecord`: each field's per-datum flat arrays joined end to end, with
    byte offsets per datum."""
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for name, value in metrics.items():
        message.metrics[name] = float(value)
    record = message.loss_fn_outputs.add()
    record.type_tag = "ArrayRecord"
    record.num_datums = len(outputs)
    names = list(outputs[0]) if outputs else []
    for name in names:
        arrays = [np.ascontiguousarray(output[name], dtype=np.float32).reshape(-1) for output in outputs]
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([array.nbytes for array in arrays])
        batched = record.fields[name]
        batched.data = b"".join(array.astype("<f4").tobytes() for array in arrays)
        batched.offsets = offsets.astype("<i8").tobytes()
        batched.dtype = pb.DTYPE_FLOAT32
    return message.SerializeToString()


@dataclass
class SampledRow:
    """One sampled sequence."""

    tokens: list[int]
    logprobs: Optional[list[float]]
    stop_reason: str
    topk: Optional[list[list[tuple[int, float]]]] = None


def _topk_message(target: Any, rows: list[list[tuple[int, float]]], k: int) -> None:
    ids = np.zeros((len(rows), k), dtype=np.int32)
    values = np.full((len(rows), k), -99999.0, dtype=np.float32)
    for i, row in enumerate(rows):
        for j, (token, logprob) in enumerate(row[:k]):
            ids[i, j], values[i, j] = token, logprob
    target.token_ids = ids.astype("<i4").tobytes()
    target.logprobs = values.astype("<f4").tobytes()
    target.k = k
    target.length = len(rows)


def encode_sample_response(
    sequences: list[SampledRow],
    prompt_logprobs: Optional[list[Optional[float]]] = None,
    topk_prompt: Optional[list[list[tuple[int, float]]]] = None,
    topk: int = 0,
) -> bytes:
    """A `SampleResponse`: tokens (int32), logprobs (float32), stop reasons, prompt logprobs (NaN where undefined)
    and top-k tables when asked for."""
    message = pb.SampleResponse()
    for row in sequences:
        sequence = message.sequences.add()
        sequence.stop_reason = pb.STOP_REASON_STOP if row.stop_reason == "stop" else pb.STOP_REASON_LENGTH
        sequence.tokens = np.asarray(row.tokens, dtype="<i4").tobytes()
        if row.logprobs is not None:
            sequence.logprobs = np.asarray(row.logprobs, dtype="<f4").tobytes()
        if row.topk is not None and topk > 0:
            _topk_message(sequence.topk_sampled_logprobs, row.topk, topk)
    if prompt_logprobs is not None:
        values = [float("nan") if value is None else value for value in prompt_logprobs]
        message.prompt_logprobs = np.asarray(values, dtype="<f4").tobytes()
    if topk_prompt is not None:
        _topk_message(message.topk_prompt_logprobs, topk_prompt, max(1, max((len(r) for r in topk_prompt), default=1)))
    return message.SerializeToString()
