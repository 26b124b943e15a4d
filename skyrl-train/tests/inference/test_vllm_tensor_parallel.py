"""The CPU twin of a tensor-parallel engine's weight update: vLLM's CPU build runs tensor_parallel_size=2 (two worker
processes, its multiprocessing executor; on GPUs the engine uses the Ray executor, which only changes where the ranks
run), and `vllm_engine.reload_weights`, the function the engine's `update_weights` calls, hands every rank the full
Hugging Face tensors. Greedy continuations before and after follow the old and the new model, so every rank loaded
its shard of every tensor through the model's own `load_weights`.

Skipped when vLLM is not installed (the main venv); `bash scripts/test_vllm.sh` runs it (about 15 s: vLLM starts two
workers).
"""

import pytest

vllm = pytest.importorskip(
    "vllm", reason="vLLM is not installed: run `bash scripts/test_vllm.sh` (CPU build, own venv)"
)

from skyrl_train.inference.vllm_engine import prepare_vllm_environment, reload_weights  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.integration]


def _ranks_parameter_shapes(worker):
    return {name: tuple(tensor.shape) for name, tensor in worker.model_runner.model.named_parameters()}


def test_every_rank_loads_its_shard_of_the_full_tensors(tmp_path, old_and_new_model, is_greedy):
    tokenizer, old, new = old_and_new_model
    prepare_vllm_environment("cpu", num_threads=1)
    llm = vllm.LLM(
        model=str(tmp_path),
        dtype="float32",
        tensor_parallel_size=2,
        distributed_executor_backend="mp",
        enforce_eager=True,
        max_model_len=64,
        max_num_seqs=4,
    )
    prompt = list(tokenizer("12+34=")["input_ids"])
    greedy = vllm.SamplingParams(max_tokens=8, temperature=0)

    def generate():
        request = vllm.inputs.TokensPrompt(prompt_token_ids=prompt)
        return list(llm.generate([request], greedy, use_tqdm=False)[0].outputs[0].token_ids)

    try:
        shards = llm.collective_rpc(_ranks_parameter_shapes)
        before = generate()
        reload_weights(llm, list(new.state_dict().items()), tensor_parallel_size=2)
        llm.reset_prefix_cache()
        after = generate()
    finally:
        llm.llm_engine.engine_core.shutdown()
    # two ranks, each holding half of the vocabulary and of the fused q/k/v (vLLM's CPU build repacks linear weights
    # into kernel layouts it does not show, so the embedding and the q/k/v bias are the shards to look at)
    attention = new.model.layers[0].self_attn
    qkv_rows = sum(getattr(attention, f"{x}_proj").bias.shape[0] for x in "qkv")
    assert len(shards) == 2 and shards[0] == shards[1]
    assert shards[0]["model.embed_tokens.weight"][0] == new.config.vocab_size // 2
    assert shards[0]["model.layers.0.self_attn.qkv_proj.bias"] == (qkv_rows // 2,)
    assert is_greedy(old, prompt, before) and is_greedy(new, prompt, after)
    assert before != after
