"""Tests of the sglang engine's pure parts, run without SGLang: config -> `sglang.Engine` arguments, our sampling
params -> SGLang's (and what is refused), SGLang's output layout -> our rows, the byte layout of a weight-sync chunk,
the pickled CUDA IPC payload, and the import guard.

The SGLang shapes used here (the `meta_info` of an output, `FlattenedTensorBucket`'s reconstruction) are those of
SGLang 0.5.23's `tokenizer_manager.py` and `weight_sync/tensor_bucket.py`.
"""

import dataclasses
import importlib.util
import io
import json
import pickle
import pickletools
import tomllib
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch

from skyrl_train.config import SkyRLConfig
from skyrl_train.inference.ray_engine import EngineSettings
from skyrl_train.inference.sglang_convert import (
    INTERNAL_SAMPLING_FIELDS,
    MAX_STOP_STRINGS,
    SGLANG_REQUIREMENT,
    byte_bucket_layout,
    check_tensor_parallel_gpus,
    check_weights_readable,
    engine_kwargs_from_settings,
    import_sglang,
    logprob_request,
    parse_output,
    sampling_params_dict,
    token_versions,
    unpad,
)
from skyrl_train.inference.sglang_sync import SharedCudaBytes, bucket_payload
from skyrl_train.inference.types import SamplingParams
from skyrl_train.models.tokenizer import build_char_tokenizer
from skyrl_train.weight_sync import WeightChunk
from skyrl_train.weight_sync.chunks import pack
from skyrl_train.weight_sync.cuda_ipc import DEVICE_ARGUMENT

SGLANG_FIELDS = tuple(  # SGLang 0.5.23's SamplingParams struct fields, recorded apart from the package's lists
    json.loads((Path(__file__).parent / "sglang_0_5_23_sampling_fields.json").read_text())["fields"]
)


def test_every_engine_key_reaches_the_sglang_engine_arguments():
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cuda",
            "trainer.seed=9",
            "generator.inference_engine.backend=sglang",
            "generator.inference_engine.model_dtype=float16",
            "generator.inference_engine.max_num_seqs=7",
            "generator.inference_engine.tensor_parallel_size=2",
            "generator.inference_engine.expert_parallel_size=2",
            "generator.inference_engine.gpu_memory_utilization=0.3",
            "generator.inference_engine.enable_prefix_caching=false",
            "generator.inference_engine.enforce_eager=true",
            "generator.inference_engine.engine_init_kwargs={enable_weights_cpu_backup: false, context_length: 512}",
            "trainer.placement.colocate_all=false",
        ],
        validate=False,
    )
    kwargs = engine_kwargs_from_settings(EngineSettings.from_config(cfg, "/models/m", tokenizer_path="/tok"))
    assert kwargs == {
        "model_path": "/models/m",
        "tokenizer_path": "/tok",
        "dtype": "float16",
        "tp_size": 2,
        "ep_size": 2,
        "mem_fraction_static": 0.3,
        "max_running_requests": 7,
        "random_seed": 9,
        "disable_radix_cache": True,
        "disable_prefill_cuda_graph": True,
        "disable_decode_cuda_graph": True,
        "enable_memory_saver": True,
        "enable_weights_cpu_backup": False,  # engine_init_kwargs win
        "enable_deterministic_inference": True,
        "attention_backend": "triton",
        "context_length": 512,
        "weight_version": "0",
    }
    # SGLang runs on CUDA, where `model_dtype: auto` is the policy's bfloat16
    cuda_defaults = SkyRLConfig.from_cli_overrides(["trainer.device=cuda"], validate=False)
    defaults = engine_kwargs_from_settings(EngineSettings.from_config(cuda_defaults, "/models/m"))
    assert defaults["tokenizer_path"] == "/models/m"
    assert (defaults["disable_radix_cache"], defaults["disable_decode_cuda_graph"]) == (False, False)
    assert "disable_cuda_graph" not in defaults  # SGLang's legacy switch (no CLI flag in 0.5.23)
    assert (defaults["enable_weights_cpu_backup"], defaults["dtype"]) == (True, "bfloat16")


@pytest.mark.parametrize(
    ("mode", "boundary", "in_flight"), [("fully_async", "token", True), ("fully_async", "auto", False)]
)
def test_the_weight_update_boundary_reaches_the_sglang_engine(monkeypatch, mode, boundary, in_flight):
    import skyrl_train.inference.sglang_engine as sglang_engine
    from skyrl_train.inference.engine_builders import build_sglang_engine

    built = {}
    # SGLang cannot start here (CUDA only): the engine class is replaced by a recorder of what the builder hands it
    monkeypatch.setattr(sglang_engine, "SGLangInferenceEngine", lambda args, **kwargs: built.update(kwargs, args=args))
    cfg = SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cuda",
            f"trainer.mode={mode}",
            "trainer.placement.colocate_all=false",
            "generator.inference_engine.backend=sglang",
            f"trainer.async_rl.weight_update_boundary={boundary}",
        ],
        validate=False,
    )
    build_sglang_engine(EngineSettings.from_config(cfg, "/models/m"))
    assert built["in_flight_weight_updates"] is in_flight and built["device"] == "cuda"


def test_the_sglang_engine_labels_weight_versions_itself():
    from skyrl_train.inference.sglang_engine import SGLangInferenceEngine

    with pytest.raises(ValueError, match="engine_init_kwargs.weight_version is set by the sglang engine itself"):
        SGLangInferenceEngine({"model_path": "/models/m", "weight_version": "default"})
    with pytest.raises(ValueError, match="engine_init_kwargs.weight_version is set by the sglang engine itself"):
        engine_kwargs_from_settings(EngineSettings(model_path="/models/m", engine_kwargs={"weight_version": "v7"}))


def test_sampling_params_map_one_to_one_and_fit_the_context():
    params = SamplingParams(
        max_tokens=100,
        temperature=0.7,
        top_p=0.9,
        top_k=20,
        min_p=0.05,
        stop=("</a>", "\n\n"),
        stop_token_ids=(7, 9),
        ignore_eos=True,
        include_stop_str_in_output=True,
        additional_kwargs={"presence_penalty": 0.5, "min_new_tokens": 2},
    )
    values = sampling_params_dict(params, seed=11, prompt_length=60, max_model_len=128, known_fields=SGLANG_FIELDS)
    assert values == {
        "max_new_tokens": 68,  # 128 - 60: what fits after the prompt
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.0,
        "stop": ["</a>", "\n\n"],
        "stop_token_ids": [7, 9],
        "ignore_eos": True,
        "no_stop_trim": True,
        "n": 1,
        "sampling_seed": 11,
        "presence_penalty": 0.5,
        "min_new_tokens": 2,
    }
    greedy = sampling_params_dict(SamplingParams(max_tokens=5, temperature=0), None, 3, 128)
    assert (greedy["max_new_tokens"], greedy["temperature"], greedy["top_k"]) == (5, 0, -1)
    assert (greedy["stop"], greedy["stop_token_ids"], greedy["sampling_seed"]) == (None, None, None)
    assert logprob_request(SamplingParams(top_logprobs=3)) == (True, 3)
    assert logprob_request(SamplingParams(logprobs=False)) == (False, 0)


@pytest.mark.parametrize(
    "params, message",
    [
        (SamplingParams(repetition_penalty=1.3), "repetition_penalty=1.3 is not supported by the sglang engine"),
        (SamplingParams(stop=tuple(f"s{i}" for i in range(MAX_STOP_STRINGS + 1))), "SGLang accepts at most 32"),
        (SamplingParams(additional_kwargs={"n": 4}), r"additional_kwargs \['n'\] duplicate first-class"),
        (SamplingParams(additional_kwargs={"sampling_seed": 4}), r"\['sampling_seed'\] duplicate first-class"),
        (SamplingParams(additional_kwargs={"best_of": 2}), r"\['best_of'\] are not SGLang sampling params"),
        (SamplingParams(additional_kwargs={"stop_strs": ["x"]}), r"\['stop_strs'\] are not SGLang sampling params"),
    ],
)
def test_what_sglang_cannot_do_is_refused_by_name(params, message):
    with pytest.raises(ValueError, match=message):
        sampling_params_dict(params, None, 4, 128, known_fields=SGLANG_FIELDS)


def test_internal_fields_are_real_sglang_fields():
    assert set(INTERNAL_SAMPLING_FIELDS) <= set(SGLANG_FIELDS)
    with pytest.raises(ValueError, match="leaves no room under max_model_len=128"):
        sampling_params_dict(SamplingParams(), None, 128, 128)


def _meta(ids, finish, logprobs=None, tops=None):
    meta = {"id": "r0", "finish_reason": finish, "prompt_tokens": 5, "weight_version": "default"}
    if logprobs is not None:
        meta["output_token_logprobs"] = [(lp, token, None) for lp, token in zip(logprobs, ids)]
    if tops is not None:
        meta["output_top_logprobs"] = tops
    return meta


def test_outputs_become_rows_with_ids_logprobs_top_logprobs_and_stop_reasons():
    tokenizer = build_char_tokenizer()
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    ids = list(tokenizer("12+3=15")["input_ids"]) + [tokenizer.eos_token_id]
    logprobs = [-0.1 * (i + 1) for i in range(len(ids))]
    tops = [[(-0.05, 99, None), (lp, token, None), (-3.0, 98, None)] for lp, token in zip(logprobs, ids)]
    tops[0] = [(-2.0, 97, None), (-0.5, 96, None)]  # unsorted: parse orders by logprob
    output = {"text": "ignored", "output_ids": ids, "meta_info": _meta(ids, {"type": "stop", "matched": 4}, logprobs)}
    output["meta_info"]["output_top_logprobs"] = tops
    params = SamplingParams(top_logprobs=2, stop=("+",))
    text, got_ids, got_logprobs, reason, got_tops = parse_output(output, params, decode)
    assert (text, got_ids, got_logprobs, reason) == ("12", ids, logprobs, "stop")
    assert got_tops[0] == [(96, -0.5), (97, -2.0)]
    assert got_tops[1] == [(99, -0.05), (ids[1], logprobs[1])]
    kept = parse_output(output, SamplingParams(stop=("+",), include_stop_str_in_output=True), decode)
    assert kept[0] == "12+"
    length = {"output_ids": ids[:3], "meta_info": _meta(ids[:3], {"type": "length", "length": 3}, logprobs[:3])}
    assert parse_output(length, SamplingParams(), decode)[3] == "length"
    aborted = {"output_ids": [], "meta_info": _meta([], {"type": "abort", "message": "Aborted"}, [])}
    assert parse_output(aborted, SamplingParams(), decode)[1:4] == ([], [], "abort")
    no_logprobs = {"output_ids": ids, "meta_info": _meta(ids, {"type": "stop"})}
    assert parse_output(no_logprobs, SamplingParams(logprobs=False), decode)[2] == []
    from_logprobs_only = {"meta_info": _meta(ids, {"type": "stop"}, logprobs)}  # skip_tokenizer_init-like layout
    assert parse_output(from_logprobs_only, SamplingParams(), decode)[1] == ids


def test_malformed_outputs_name_the_row_and_what_is_wrong():
    decode = lambda ids: ""  # noqa: E731
    ids = [5, 6, 7]
    wrong_tokens = {"output_ids": ids, "meta_info": _meta([5, 6, 8], {"type": "stop"}, [-1.0, -1.0, -1.0])}
    with pytest.raises(ValueError, match=r"SGLang output 3: output_token_logprobs name tokens \[5, 6, 8\]"):
        parse_output(wrong_tokens, SamplingParams(), decode, row=3)
    with pytest.raises(ValueError, match="SGLang output 0: logprobs were asked for"):
        parse_output({"output_ids": ids, "meta_info": _meta(ids, {"type": "stop"})}, SamplingParams(), decode)
    with pytest.raises(ValueError, match="unexpected finish_reason None"):
        parse_output({"output_ids": ids, "meta_info": _meta(ids, None, [-1.0] * 3)}, SamplingParams(), decode)
    with pytest.raises(ValueError, match="has no meta_info"):
        parse_output({"output_ids": ids}, SamplingParams(), decode)
    with pytest.raises(ValueError, match="None output_top_logprobs steps for 3 tokens"):
        parse_output(
            {"output_ids": ids, "meta_info": _meta(ids, {"type": "stop"}, [-1.0] * 3)},
            SamplingParams(top_logprobs=1),
            decode,
        )


def _spans(*triples):
    """`meta_info.weight_versions` as SGLang 0.5.23's `add_weight_versions_to_meta_info` writes it."""
    return {"weight_versions": [{"version": v, "start": start, "end": end} for v, start, end in triples]}


def test_weight_version_spans_become_one_version_per_token():
    # the weights changed from "0" to "1" after the request's third token, then to "2" after its fifth
    assert token_versions(_spans(("0", 0, 3), ("1", 3, 5), ("2", 5, 7)), 7) == [0, 0, 0, 1, 1, 2, 2]
    assert token_versions(_spans(("4", 0, 6)), 6) == [4] * 6  # no change while it ran
    assert token_versions(_spans(("0", 0, 0)), 0) == []  # nothing generated
    assert token_versions({"weight_version": "3"}, 5) is None  # no spans: the caller keeps its own label


def test_weight_version_spans_that_do_not_label_every_token_once_name_the_row():
    with pytest.raises(
        ValueError, match=r"SGLang output 2: weight_versions span .*'default'.* not \{version: <integer>"
    ):
        token_versions(_spans(("default", 0, 4)), 4, row=2)
    with pytest.raises(ValueError, match="SGLang output 0: weight_versions spans .* leave a gap or overlap"):
        token_versions(_spans(("0", 0, 3), ("1", 4, 6)), 6)
    with pytest.raises(ValueError, match="SGLang output 1: weight_versions spans cover 5 tokens, the output has 6"):
        token_versions(_spans(("0", 0, 5)), 6, row=1)


def test_a_packed_chunk_read_as_sglang_byte_bucket_gives_back_every_tensor():
    tensors = [torch.randn(3, 5), torch.randn(7), torch.randn(2, 2, 3)]
    for dtype in (torch.bfloat16, torch.float32):
        cast = [tensor.to(dtype) for tensor in tensors]
        flat = pack(cast).view(torch.uint8)  # what the broadcast / cuda_ipc sender shares
        layout = byte_bucket_layout([tuple(t.shape) for t in cast], dtype)
        assert layout[-1][2] == flat.numel()
        for tensor, (shape, start, end) in zip(cast, layout):
            # FlattenedTensorBucket.reconstruct_tensors: flattened[start:end].view(dtype).reshape(shape)
            assert torch.equal(flat[start:end].view(dtype).reshape(shape), tensor)


def test_vocabulary_padding_is_cut_off_before_a_checksum():
    sent = torch.randn(101, 8)
    served = torch.cat([sent, torch.zeros(27, 8)])  # SGLang pads 101 vocabulary rows to 128
    assert torch.equal(unpad(served, (101, 8)), sent)
    assert unpad(served, None) is served and unpad(sent, (101, 8)) is sent
    assert unpad(sent, (128, 8)) is sent  # smaller than sent: a real mismatch, left for the checksum
    assert unpad(sent, (101, 8, 1)) is sent


@dataclasses.dataclass
class MetadataStandIn:
    """The fields of SGLang's FlattenedTensorMetadata."""

    name: str
    shape: torch.Size
    dtype: torch.dtype
    start_idx: int
    end_idx: int
    numel: int


class _Recorder(pickle.Unpickler):
    """Unpickles with every global replaced by a recorder of the call, to see what SGLang's worker would run."""

    def find_class(self, module, name):
        if (module, name) == ("torch.multiprocessing.reductions", "rebuild_cuda_tensor"):
            return lambda *arguments: ("rebuilt", arguments)
        return super().find_class(module, name)


def _globals(data: bytes) -> set[str]:
    names, strings = set(), []
    for opcode, argument, _ in pickletools.genops(data):
        if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(argument)
        elif opcode.name == "STACK_GLOBAL":
            names.add(f"{strings[-2]}.{strings[-1]}")
        elif opcode.name == "GLOBAL":
            names.add(argument.replace(" ", "."))
    return names


def test_cuda_ipc_payload_pickles_as_a_rebuild_call_with_the_gpu_uuid():
    arguments = (torch.Tensor, torch.Size([12]), (1,), 0, "storage", torch.uint8, 3, b"handle", 12, 0, False)
    chunk = WeightChunk(
        version=2,
        index=0,
        final=True,
        names=["a.weight", "b.bias"],
        shapes=[(2, 2), (2,)],
        dtype="bfloat16",
        payload={"rebuild": None, "arguments": arguments, "device_uuid": "GPU-1234"},
    )
    payload = bucket_payload(chunk, MetadataStandIn)
    buffer = io.BytesIO()
    ForkingPickler(buffer).dump(payload)
    data = buffer.getvalue()
    assert "torch.multiprocessing.reductions.rebuild_cuda_tensor" in _globals(data)
    assert not any(name.startswith("skyrl_train") for name in _globals(data))  # SGLang's unpickler refuses those
    loaded = _Recorder(io.BytesIO(data)).load()
    tag, rebuilt_with = loaded["flattened_tensor"]
    assert tag == "rebuilt" and rebuilt_with[DEVICE_ARGUMENT] == "GPU-1234"
    assert rebuilt_with[:DEVICE_ARGUMENT] == arguments[:DEVICE_ARGUMENT]
    assert rebuilt_with[DEVICE_ARGUMENT + 1 :] == arguments[DEVICE_ARGUMENT + 1 :]
    meta = loaded["metadata"]
    assert [(m.name, tuple(m.shape), m.start_idx, m.end_idx, m.numel) for m in meta] == [
        ("a.weight", (2, 2), 0, 8, 8),
        ("b.bias", (2,), 8, 12, 4),
    ]
    assert {m.dtype for m in meta} == {torch.bfloat16}
    assert SharedCudaBytes(arguments).__reduce__()[1] == arguments


def test_each_tensor_parallel_worker_opens_its_own_ipc_handle():
    first = (torch.Tensor, torch.Size([4]), (1,), 0, "storage", torch.uint8, 0, b"handle", 4, 0, b"slot-1")
    second = first[:-1] + (b"slot-2",)
    payload = {"handles": [(None, first), (None, second)], "device_uuid": "GPU-9"}
    chunk = WeightChunk(version=1, index=0, final=True, names=["w"], shapes=[(2,)], dtype="bfloat16", payload=payload)
    opened = [bucket_payload(chunk, MetadataStandIn, rank)["flattened_tensor"].arguments for rank in range(2)]
    assert [arguments[-1] for arguments in opened] == [b"slot-1", b"slot-2"]
    assert {arguments[DEVICE_ARGUMENT] for arguments in opened} == {"GPU-9"}
    with pytest.raises(ValueError, match="holds 2 handle\\(s\\), worker 2 has none"):
        bucket_payload(chunk, MetadataStandIn, 2)


def test_tensor_parallel_workers_need_as_many_gpus_in_the_actor():
    check_tensor_parallel_gpus(2, ("4", "5"))
    check_tensor_parallel_gpus(2, None)  # not restricted: every GPU of the node
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 but its actor sees 1 GPU\(s\) \(\['3'\]\)"):
        check_tensor_parallel_gpus(2, ("3",))


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_import_guard_says_how_to_install_sglang():
    with pytest.raises(ImportError, match=r"backend=sglang needs the sglang package.*setup\.sh --gpu sglang"):
        import_sglang()


def test_the_sglang_extra_installs_the_versions_the_engine_is_written_for():
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["sglang"] == [SGLANG_REQUIREMENT]


def test_checksum_read_back_is_refused_up_front_for_models_sglang_cannot_read():
    check_weights_readable(["LlamaForCausalLM"])
    check_weights_readable(["MistralForCausalLM"])  # inherits Llama's get_weights_by_name
    with pytest.raises(NotImplementedError, match=r"cannot read back the weights of \['Qwen2ForCausalLM'\]"):
        check_weights_readable(["Qwen2ForCausalLM"])
    with pytest.raises(NotImplementedError, match="without verify_weight_sync"):
        check_weights_readable(None)
