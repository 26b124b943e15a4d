"""The compute of one base model: many LoRA adapters (one per training client, each with its own AdamW state) on
one shared base, trained with the Tinker losses and sampled through skyrl_train's `hf` engine.

Everything here runs on the service's single compute thread (the model is not thread-safe). The base model and
tokenizer load through `skyrl_train.models.loading`, adapters are peft LoRA layers injected into the base model, the
losses come from `skyrl_train.algorithms` (via `skyrl_tx.losses`), and generation is `HFInferenceEngine.generate_batch`
with the wanted adapter active (peft's layers consult the active adapter; the base model runs with adapters off).
`ComputeHost` is what the service calls; `skyrl_tx.ray_compute.RayLoraHost` implements it with a `LoraHost` in each
rank of a skyrl_train `WorkerGroup` (`skyrl_tx.lora_worker.MultiLoraWorker`).
"""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file, save_file

from skyrl_train.inference.hf_engine import HFInferenceEngine
from skyrl_train.inference.types import SamplingParams
from skyrl_train.models.loading import load_causal_lm, load_tokenizer
from skyrl_train.utils.rng_state import torch_seeded
from skyrl_tx.losses import loss_spec, tinker_loss
from skyrl_tx.wire import SampledRow, TrainDatum, WireError

LORA_ALPHA = 32.0
"""LoRA alpha of every adapter (scale alpha / rank), as in the other Tinker-compatible server."""
ADAPTER_FILE, ADAPTER_CONFIG, OPTIMIZER_FILE, META_FILE = (
    "adapter_model.safetensors",
    "adapter_config.json",
    "optimizer.pt",
    "skyrl_tx.json",
)


@dataclass
class LoraSpec:
    """Which LoRA a training client asked for (Tinker's `LoraConfig`)."""

    rank: int = 32
    seed: Optional[int] = None
    train_mlp: bool = True
    train_attn: bool = True
    train_unembed: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-able fields (stored in the database and next to checkpoints)."""
        return asdict(self)


@dataclass
class Adapter:
    """A trained adapter: its spec, its AdamW (created at the first optim_step) and how many steps it took."""

    name: str
    spec: LoraSpec
    optimizer: Optional[torch.optim.AdamW] = None
    steps: int = 0
    params: list[torch.nn.Parameter] = field(default_factory=list)


@dataclass
class SampleJob:
    """One asample request as the compute thread runs it."""

    prompt: list[int]
    num_samples: int
    max_tokens: Optional[int]
    temperature: float
    top_k: int
    top_p: float
    seed: Optional[int]
    stop: Any
    prompt_logprobs: bool = False
    topk_prompt_logprobs: int = 0
    topk_sample_logprobs: int = 0


@dataclass
class SampleResult:
    """What one SampleJob produced."""

    sequences: list[SampledRow]
    prompt_logprobs: Optional[list[Optional[float]]] = None
    topk_prompt: Optional[list[list[tuple[int, float]]]] = None


class Sampler(Protocol):
    """What runs a base model's sampling jobs: its `ComputeHost` (`hf` engine), or a `VLLMSampler`."""

    def sample(self, sampler_dir: Optional[Path], jobs: list[SampleJob]) -> list[SampleResult]:
        """Run sampling jobs of one sampler (saved adapter weights, or the base model for None), in job order."""

    def close(self) -> None:
        """Release what the sampler holds."""


def sampling_params_for(job: SampleJob, max_context: int) -> SamplingParams:
    """The engines' `SamplingParams` for a job on a model of `max_context` positions (raises ValueError on values
    they refuse); every sampler (`hf` on a host, `vllm`) uses these."""
    prompt_room = max_context - len(job.prompt)
    stop = job.stop
    strings = tuple(s for s in (stop or []) if isinstance(s, str))
    token_ids = tuple(int(s) for s in (stop or []) if not isinstance(s, str))
    return SamplingParams(
        max_tokens=max(1, min(job.max_tokens or prompt_room, prompt_room)),
        temperature=job.temperature,
        top_k=job.top_k if job.top_k and job.top_k > 0 else -1,
        top_p=job.top_p,
        stop=strings,
        stop_token_ids=token_ids,
        ignore_eos=stop is not None and len(stop) == 0,
        n=job.num_samples,
        logprobs=True,
        top_logprobs=job.topk_sample_logprobs,
    )


def sampler_key(directory: Path) -> str:
    """`<folder>@<adapter file write time in ns>`: one save of a sampler's weights (a save into the same folder gets a
    new key, so every cache keyed by it reloads)."""
    return f"{directory}@{(directory / ADAPTER_FILE).stat().st_mtime_ns}"


def read_meta(directory: Path) -> dict[str, Any]:
    """The `skyrl_tx.json` a checkpoint folder holds: its base model, LoRA spec and step count."""
    return json.loads((directory / META_FILE).read_text(encoding="utf-8"))


def _module_groups(model: torch.nn.Module) -> dict[str, set[str]]:
    """Leaf names of the linear layers by part: attention, MLP and the unembedding (`lm_head`)."""
    groups: dict[str, set[str]] = {"attn": set(), "mlp": set(), "unembed": set()}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        leaf = name.rsplit(".", 1)[-1]
        if name == "lm_head" or leaf == "lm_head":
            groups["unembed"].add(leaf)
        elif ".mlp." in f".{name}." or ".feed_forward." in f".{name}.":
            groups["mlp"].add(leaf)
        elif "attn" in name or "attention" in name:
            groups["attn"].add(leaf)
    return groups


class ComputeHost(ABC):
    """The compute of one base model as the service drives it (`LoraHost` in this process, `RayLoraHost` on Ray
    workers), with the request checks every host shares: they need only the vocabulary, context length and pad id.

    Every method runs on the service's single compute thread, except `check_prompt`, `sampling_params` and
    `padded_batch`, which only read the attributes below.
    """

    name: str
    """The public name of the base model."""
    path: str
    """Its folder (or hub id)."""
    vocab_size: int
    max_context: int
    """Longest sequence the model takes (`max_position_embeddings`, 2048 when the config has none)."""
    pad_id: int
    model_type: str
    """The config's `model_type` (`get_info`'s `arch`)."""
    adapters: Mapping[str, Any]
    """The training clients' adapters by model id."""

    @abstractmethod
    def add_adapter(self, name: str, spec: LoraSpec) -> None:
        """A fresh adapter (B = 0, so it starts as the base model) for training client `name`."""

    @abstractmethod
    def remove_adapter(self, name: str) -> None:
        """Drop an adapter and its optimizer (unknown names are ignored)."""

    @abstractmethod
    def forward_backward(
        self, name: str, data: list[TrainDatum], loss_fn: str, config: dict[str, Any], forward_only: bool
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Per-datum `logprobs` of the target tokens and the loss metrics; gradients accumulate on the adapter
        unless `forward_only`."""

    @abstractmethod
    def optim_step(self, name: str, adam: dict[str, float]) -> dict[str, float]:
        """One AdamW step on the accumulated gradients, then zero them; returns the step's metrics."""

    @abstractmethod
    def save(self, name: str, directory: Path, with_optimizer: bool) -> int:
        """Write the adapter (and, if asked, its optimizer state) into `directory`; returns the bytes written."""

    @abstractmethod
    def load(self, name: str, directory: Path, with_optimizer: bool) -> LoraSpec:
        """A new adapter `name` holding the weights saved in `directory` (and its optimizer state, if asked)."""

    @abstractmethod
    def sample(self, sampler_dir: Optional[Path], jobs: list[SampleJob]) -> list[SampleResult]:
        """Run sampling jobs of one sampler (saved adapter weights, or the base model for None), in job order."""

    def close(self) -> None:
        """Release what the host holds outside this process (nothing for an in-process host)."""
        return None

    def check_prompt(self, prompt: list[int]) -> None:
        """Refuse an empty prompt, ids outside the vocabulary, or a prompt that leaves no room to generate."""
        if not prompt:
            raise WireError("prompt: no tokens")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise WireError(f"prompt: token ids must be in [0, {self.vocab_size})")
        if len(prompt) >= self.max_context:
            raise WireError(f"prompt: {len(prompt)} tokens; {self.name} takes at most {self.max_context - 1}")

    def sampling_params(self, job: SampleJob) -> SamplingParams:
        """The engine's `SamplingParams` for a job (raises ValueError on values it refuses)."""
        return sampling_params_for(job, self.max_context)

    def padded_batch(
        self, data: list[TrainDatum], inputs_needed: tuple[str, ...]
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """The checked data as right-padded CPU tensors: token ids [B, T], a 1/0 `valid` mask [B, T] and each needed
        loss input [B, T]. Refuses (WireError naming the datum and field) empty data, over-long data, token ids
        outside the vocabulary, missing inputs, inputs whose length differs from the tokens, and non-finite values."""
        if not data:
            raise WireError("forward_backward: data is empty")
        width = max(len(datum.tokens) for datum in data)
        if width == 0:
            raise WireError("forward_backward: every datum has an empty model_input")
        if width > self.max_context:
            raise WireError(f"forward_backward: a datum has {width} tokens; {self.name} takes {self.max_context}")
        tokens = torch.full((len(data), width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((len(data), width), dtype=torch.float32)
        inputs = {name: torch.zeros((len(data), width), dtype=torch.float32) for name in inputs_needed}
        for row, datum in enumerate(data):
            length = len(datum.tokens)
            ids = torch.tensor(datum.tokens, dtype=torch.long)
            if length and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
                raise WireError(f"data[{row}].model_input: token ids must be in [0, {self.vocab_size})")
            tokens[row, :length], valid[row, :length] = ids, 1.0
            for name in inputs_needed:
                if name not in datum.inputs:
                    raise WireError(f"data[{row}].loss_fn_inputs: missing {name!r} (needs {list(inputs_needed)})")
                values = datum.inputs[name]
                if values.size != length:
                    raise WireError(
                        f"data[{row}].loss_fn_inputs.{name}: {values.size} values for {length} model_input tokens"
                    )
                if name == "target_tokens" and length and (values.min() < 0 or values.max() >= self.vocab_size):
                    raise WireError(f"data[{row}].loss_fn_inputs.target_tokens: ids must be in [0, {self.vocab_size})")
                if name != "target_tokens" and not np.isfinite(values).all():
                    raise WireError(f"data[{row}].loss_fn_inputs.{name}: values must be finite")
                inputs[name][row, :length] = torch.from_numpy(np.asarray(values, dtype=np.float32).copy())
        return tokens, valid, inputs


class LoraHost(ComputeHost):
    """One base model with its LoRA adapters, their optimizers, and a sampler over them."""

    def __init__(
        self,
        name: str,
        path: str,
        max_sampler_adapters: int = 16,
        device: str = "cpu",
        dtype: str = "float32",
        model: Optional[torch.nn.Module] = None,
    ) -> None:
        """`model`: the base model already loaded from `path` (e.g. FSDP2-sharded by a `MultiLoraWorker`) on
        `device`; loaded here in `dtype` when None."""
        self.name = name
        self.path = path
        self.device = torch.device(device)
        self.model = (model if model is not None else load_causal_lm(path, dtype=dtype, device=device)).eval()
        self.tokenizer = load_tokenizer(path, padding_side="left")
        self.vocab_size = int(self.model.config.vocab_size)
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.model_type = str(self.model.config.model_type)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.groups = _module_groups(self.model)
        self.peft: Optional[PeftModel] = None
        self.adapters: dict[str, Adapter] = {}
        self.sampler_adapters: OrderedDict[str, str] = OrderedDict()
        """`<sampler weights folder>@<adapter file mtime>` -> adapter name, least recently used first."""
        self.max_sampler_adapters = max_sampler_adapters
        self.engine = HFInferenceEngine(self.model, self.tokenizer, max_batch_size=256)
        self._sampler_count = 0

    # ----- adapters ----------------------------------------------------------------------------------------------
    def target_modules(self, spec: LoraSpec) -> list[str]:
        """The linear layers a spec trains; refuses a spec that trains nothing."""
        names = set()
        for part, wanted in (("attn", spec.train_attn), ("mlp", spec.train_mlp), ("unembed", spec.train_unembed)):
            if wanted:
                names |= self.groups[part]
        if not names:
            raise WireError("lora_config: train_attn, train_mlp and train_unembed are all false; nothing would train")
        return sorted(names)

    def _lora_config(self, spec: LoraSpec) -> LoraConfig:
        if spec.rank < 1 or spec.rank > 512:
            raise WireError(f"lora_config.rank must be in [1, 512], got {spec.rank}")
        return LoraConfig(
            r=spec.rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=self.target_modules(spec)
        )

    def _insert(self, name: str, config: LoraConfig, seed: Optional[int]) -> None:
        with torch_seeded(seed):
            if self.peft is None:
                self.peft = get_peft_model(self.model, config, adapter_name=name)
                self.peft.eval()
            else:
                self.peft.add_adapter(name, config)

    def _adapter_params(self, name: str) -> list[torch.nn.Parameter]:
        marker = f".{name}."
        return [param for key, param in sorted(self.model.named_parameters()) if marker in key]

    def add_adapter(self, name: str, spec: LoraSpec) -> None:
        """A fresh adapter (B = 0, so it starts as the base model) for training client `name`."""
        self._insert(name, self._lora_config(spec), spec.seed)
        adapter = Adapter(name=name, spec=spec)
        adapter.params = self._adapter_params(name)
        for param in adapter.params:
            param.requires_grad_(True)
        self.adapters[name] = adapter

    def remove_adapter(self, name: str) -> None:
        """Drop an adapter and its optimizer."""
        if name in self.adapters and self.peft is not None:
            self.peft.delete_adapter(name)
            del self.adapters[name]

    def activate(self, name: Optional[str]) -> None:
        """Make adapter `name` the one forwards use (None: leave the active one), keeping every trained adapter
        trainable."""
        if name is not None:
            assert self.peft is not None
            self.peft.set_adapter(name)
            for adapter in self.adapters.values():  # set_adapter freezes the others: keep every trained adapter live
                for param in adapter.params:
                    param.requires_grad_(True)

    # ----- training ----------------------------------------------------------------------------------------------
    def forward_backward(
        self, name: str, data: list[TrainDatum], loss_fn: str, config: dict[str, Any], forward_only: bool
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Per-datum `logprobs` of the target tokens and the summed loss; gradients accumulate on the adapter
        (in `.grad`, so chunks of one batch add up in any order) unless `forward_only`."""
        adapter = self.adapters[name]
        spec, resolved = loss_spec(loss_fn, config)
        tokens, valid, inputs = self.padded_batch(data, spec.inputs)
        tokens, valid = tokens.to(self.device), valid.to(self.device)
        inputs = {key: values.to(self.device) for key, values in inputs.items()}
        self.activate(adapter.name)
        with torch.set_grad_enabled(not forward_only):
            logits = self.model(input_ids=tokens, attention_mask=valid.long()).logits.float()
            targets = inputs.pop("target_tokens").long()
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            loss, metrics = tinker_loss(loss_fn, resolved, logprobs, inputs, valid)
            if not forward_only:
                loss.backward()
        values = logprobs.detach().float().cpu().numpy()
        outputs = [{"logprobs": values[row, : len(datum.tokens)].copy()} for row, datum in enumerate(data)]
        return outputs, metrics

    def optim_step(self, name: str, adam: dict[str, float]) -> dict[str, float]:
        """One AdamW step on the accumulated gradients (clipped to `grad_clip_norm` when > 0), then zero them."""
        adapter = self.adapters[name]
        lr, beta1, beta2 = adam["learning_rate"], adam["beta1"], adam["beta2"]
        eps, weight_decay, clip = adam["eps"], adam["weight_decay"], adam["grad_clip_norm"]
        if adapter.optimizer is None:
            adapter.optimizer = torch.optim.AdamW(adapter.params, lr=lr, betas=(beta1, beta2), eps=eps)
        for group in adapter.optimizer.param_groups:
            group.update(lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        grads = [param.grad for param in adapter.params if param.grad is not None]
        norm = (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        )
        if clip > 0 and grads:
            torch.nn.utils.clip_grad_norm_(adapter.params, clip)
        adapter.optimizer.step()
        adapter.optimizer.zero_grad(set_to_none=True)
        adapter.steps += 1
        return {"grad_norm:mean": norm, "learning_rate:mean": lr, "step:max": float(adapter.steps)}

    # ----- checkpoints -------------------------------------------------------------------------------------------
    def save(self, name: str, directory: Path, with_optimizer: bool) -> int:
        """Write the adapter (peft format) and, if asked, its optimizer state into `directory`; returns bytes."""
        assert self.peft is not None
        adapter = self.adapters[name]
        directory.mkdir(parents=True, exist_ok=True)
        state = get_peft_model_state_dict(self.peft, adapter_name=name, save_embedding_layers=False)
        save_file({key: value.detach().contiguous() for key, value in state.items()}, str(directory / ADAPTER_FILE))
        config = self.peft.peft_config[name].to_dict()
        config["target_modules"] = sorted(config["target_modules"])
        config["base_model_name_or_path"] = self.name
        (directory / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, default=str), encoding="utf-8")
        meta = {"base_model": self.name, "lora": adapter.spec.to_dict(), "steps": adapter.steps}
        (directory / META_FILE).write_text(json.dumps(meta), encoding="utf-8")
        if with_optimizer and adapter.optimizer is not None:
            torch.save(adapter.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        return sum(path.stat().st_size for path in directory.iterdir())

    def load(self, name: str, directory: Path, with_optimizer: bool) -> LoraSpec:
        """A new adapter `name` holding the weights saved in `directory` (and its optimizer state, if asked)."""
        meta = read_meta(directory)
        spec = LoraSpec(**meta["lora"])
        self.add_adapter(name, spec)
        state = load_file(str(directory / ADAPTER_FILE))
        set_peft_model_state_dict(self.peft, state, adapter_name=name)
        adapter = self.adapters[name]
        adapter.steps = int(meta.get("steps", 0))
        if with_optimizer:
            if not (directory / OPTIMIZER_FILE).is_file():
                raise WireError(f"{directory.name}: this checkpoint holds no optimizer state (no optim_step before it)")
            adapter.optimizer = torch.optim.AdamW(adapter.params)
            adapter.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, weights_only=True))
        return spec

    # ----- sampling ----------------------------------------------------------------------------------------------
    def sampler_adapter(self, directory: Optional[Path]) -> Optional[str]:
        """The adapter name serving the sampler weights in `directory` (loaded on first use, least recently used
        evicted beyond `max_sampler_adapters`); None for the base model."""
        if directory is None:
            return None
        # the file's write time is part of the key: weights saved again under the same name (overwrite) reload
        key = sampler_key(directory)
        if key in self.sampler_adapters:
            self.sampler_adapters.move_to_end(key)
            return self.sampler_adapters[key]
        for stale in [k for k in self.sampler_adapters if k.rsplit("@", 1)[0] == str(directory)]:
            self.peft.delete_adapter(self.sampler_adapters.pop(stale))
        spec = LoraSpec(**read_meta(directory)["lora"])
        self._sampler_count += 1
        name = f"sampler{self._sampler_count}"
        self._insert(name, self._lora_config(spec), None)
        set_peft_model_state_dict(self.peft, load_file(str(directory / ADAPTER_FILE)), adapter_name=name)
        self.sampler_adapters[key] = name
        while len(self.sampler_adapters) > self.max_sampler_adapters:
            _, evicted = self.sampler_adapters.popitem(last=False)
            self.peft.delete_adapter(evicted)
        return name

    @torch.inference_mode()
    def _prompt_logprobs(self, prompt: list[int], topk: int) -> tuple[list[Optional[float]], Optional[list]]:
        ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
        logits = self.model(input_ids=ids).logits.float()[0]
        table = torch.log_softmax(logits[:-1], dim=-1)
        values = table.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).tolist()
        tops = None
        if topk > 0:
            top_values, top_ids = table.topk(min(topk, self.vocab_size), dim=-1)
            tops = [[]] + [list(zip(i, v, strict=True)) for i, v in zip(top_ids.tolist(), top_values.tolist())]
        return [None, *values], tops

    def sample(self, sampler_dir: Optional[Path], jobs: list[SampleJob]) -> list[SampleResult]:
        """Run sampling jobs of one sampler (adapter or base model), batching jobs with equal params."""
        adapter = self.sampler_adapter(sampler_dir)
        context: Any = contextlib.nullcontext()  # no adapter left (every session ended): the LoRA layers are inert
        if adapter is None and self.peft is not None and self.peft.peft_config:
            if self.peft.active_adapter not in self.peft.peft_config:
                # peft keeps naming a deleted adapter active when the last one went (and after adding a new one),
                # and disable_adapter looks the active one up
                self.activate(next(iter(self.peft.peft_config)))
            context = self.peft.disable_adapter()
        if adapter is not None:
            self.peft.set_adapter(adapter)
        results: list[Optional[SampleResult]] = [None] * len(jobs)
        groups: dict[SamplingParams, list[int]] = {}
        for index, job in enumerate(jobs):
            groups.setdefault(self.sampling_params(job), []).append(index)
        with context:
            for params, indices in groups.items():
                prompts = [jobs[i].prompt for i in indices]
                rows = self.engine.generate_batch(prompts, params, [jobs[i].seed for i in indices])
                for position, index in enumerate(indices):
                    job = jobs[index]
                    mine = rows[position * params.n : (position + 1) * params.n]
                    sequences = [
                        SampledRow(tokens=list(ids), logprobs=list(lps), stop_reason=reason, topk=tops or None)
                        for _, ids, lps, reason, tops, *_ in mine  # newer engines append token versions
                    ]
                    result = SampleResult(sequences=sequences)
                    if job.prompt_logprobs or job.topk_prompt_logprobs:
                        result.prompt_logprobs, result.topk_prompt = self._prompt_logprobs(
                            job.prompt, job.topk_prompt_logprobs
                        )
                    results[index] = result
        assert all(result is not None for result in results)
        return [result for result in results if result is not None]
