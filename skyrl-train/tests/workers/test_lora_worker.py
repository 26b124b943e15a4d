"""LoRA on the FSDP2 policy worker in-process (world size 1): only adapters train, the adapters-off forward is the base
model, adapter-only checkpoints resume exactly, and the exports (adapter, merged) reload in peft / transformers."""

import json

import torch
from peft import PeftModel

from skyrl_train.algorithms.masked import zero_masked
from skyrl_train.models.loading import load_causal_lm
from skyrl_train.models.logprobs import response_logprobs
from skyrl_train.workers import PolicyWorker

LORA = ("trainer.policy.model.lora.rank=4", "trainer.policy.model.lora.alpha=8", "trainer.policy.optimizer.lr=1e-2")


def _policy(config, group):
    worker = PolicyWorker("policy", 0, 1, *group, config, num_threads=1)
    worker.init_model()
    return worker


def _train(worker, batch, advantages, steps):
    for _ in range(steps):
        worker.forward_backward(batch, advantages, None, on_policy=True)
        worker.optim_step()


def _weights(worker, **kwargs):
    return {name: tensor.clone() for name, tensor in worker.get_weights(**kwargs)}


def _base_logprobs(model_dir, batch):
    model = load_causal_lm(model_dir).eval()
    with torch.no_grad():
        expected, _ = response_logprobs(
            model, batch.input_ids, batch.attention_mask, batch.position_ids, batch.prompt_width, temperature=1.0
        )
    return zero_masked(expected, batch.response_mask)


def test_lora_trains_only_the_adapters_and_the_base_stays_the_reference(
    single_rank_group, worker_config, tiny_model_dir, make_batch, grpo_advantages
):
    worker = _policy(worker_config(*LORA), single_rank_group)
    trainable = {name for name, param in worker.model.named_parameters() if param.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    optimized = {id(param) for group in worker.strategy.optimizer.param_groups for param in group["params"]}
    assert optimized == {id(param) for param in worker.model.parameters() if param.requires_grad}
    batch = make_batch(rows=6, seed=4)
    base = _base_logprobs(tiny_model_dir, batch)
    # B starts at zero: the adapted model is the base model until the first update.
    assert torch.allclose(worker.forward(batch), base, atol=1e-5)
    before = _weights(worker)
    _train(worker, batch, grpo_advantages(batch), steps=3)
    after = _weights(worker)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and changed <= trainable
    assert not torch.allclose(worker.forward(batch), base, atol=1e-4)  # the adapters now change the policy
    assert torch.allclose(worker.forward_base(batch), base, atol=1e-5)  # adapters off: the base model again
    adapters = _weights(worker, trainable_only=True)
    assert set(adapters) == trainable


def test_lora_checkpoint_holds_the_adapters_and_resumes_exactly(
    single_rank_group, worker_config, make_batch, grpo_advantages, tmp_path
):
    batch = make_batch(rows=6, seed=5)
    advantages = grpo_advantages(batch, seed=1)
    uninterrupted = _policy(worker_config(*LORA), single_rank_group)
    _train(uninterrupted, batch, advantages, steps=2)
    uninterrupted.save_checkpoint(str(tmp_path / "ckpt"))
    _train(uninterrupted, batch, advantages, steps=2)

    resumed = _policy(worker_config(*LORA), single_rank_group)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    _train(resumed, batch, advantages, steps=2)
    expected, got = _weights(uninterrupted), _weights(resumed)
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name  # same adapters, same AdamW moments, same float sums

    # The checkpoint holds the adapters (and their optimizer state), not the frozen base weights.
    metadata = torch.distributed.checkpoint.HuggingFaceStorageReader(str(tmp_path / "ckpt")).read_metadata()
    model_keys = {key.removeprefix("model.") for key in metadata.state_dict_metadata if key.startswith("model.")}
    assert model_keys and all(".lora_A." in key or ".lora_B." in key for key in model_keys)


def test_lora_export_writes_the_adapter_and_the_merged_model(
    single_rank_group, worker_config, tiny_model_dir, make_batch, grpo_advantages, tmp_path
):
    worker = _policy(worker_config(*LORA, "trainer.policy.model.lora.merge_on_export=true"), single_rank_group)
    batch = make_batch(rows=4, seed=6)
    _train(worker, batch, grpo_advantages(batch), steps=2)
    worker.save_hf_model(str(tmp_path / "export"))
    config = json.loads((tmp_path / "export" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 8
    ids = torch.tensor([[3, 50, 51, 52, 4]])
    expected = worker.model(ids).logits.detach()
    adapted = PeftModel.from_pretrained(load_causal_lm(tiny_model_dir), str(tmp_path / "export")).eval()
    assert torch.allclose(adapted(ids).logits, expected, atol=1e-5)
    merged = load_causal_lm(str(tmp_path / "export" / "merged")).eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert torch.allclose(merged(ids).logits, expected, atol=1e-4)


def test_lora_keys_reach_the_adapters(single_rank_group, worker_config):
    worker = _policy(
        worker_config(
            *LORA,
            "trainer.policy.model.lora.dropout=0.25",
            "trainer.policy.model.lora.target_modules=[q_proj,v_proj,down_proj]",
            "trainer.policy.model.lora.exclude_modules=[down_proj]",
        ),
        single_rank_group,
    )
    trainable = {name for name, param in worker.model.named_parameters() if param.requires_grad}
    adapted = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable}
    assert adapted == {"q_proj", "v_proj"}  # down_proj is targeted but excluded
    config = worker.model.peft_config["default"]
    assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 8, 0.25)
    dropouts = [m.p for name, m in worker.model.named_modules() if name.endswith("lora_dropout.default")]
    assert dropouts and set(dropouts) == {0.25}
