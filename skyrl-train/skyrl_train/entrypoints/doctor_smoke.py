"""The doctor's smoke step: one real generate and one real policy update, through the classes a training run uses.

Parts, each timed and reported PASS / FAIL / SKIP (a part whose input failed is skipped):

1. `model`: a tiny Qwen2 model shaped like the embedded default (`TinyModelSpec(size=1)`) and the char tokenizer,
   saved as a Hugging Face folder in a temporary directory (or `--model DIR`, an existing folder).
2. `ray`: a local Ray cluster of 2 CPUs (skipped with `--no-ray`).
3. `actors`: an `EngineActor` with the `hf` engine and a one-rank `PolicyWorker` group (FSDP2 over gloo), both on
   Ray; in-process without Ray.
4. `generate`: 4 prompts x 2 samples, 8 new tokens, with the engine's log-probs.
5. `train`: the samples become a `TrainingBatch` with GRPO advantages of made-up 0/1 rewards; the policy runs
   `forward` (old log-probs), `forward_backward` and `optim_step`, which must return a finite, positive grad norm.

It runs on CPU whatever the machine has: it checks the installed software stack, not the GPUs.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Optional

PROMPTS = ["What is 2+3?", "Say hi.", "Count to 3.", "What is 7-4?"]
"""The smoke prompts (chat messages of one user turn)."""

SAMPLES_PER_PROMPT = 2
MAX_NEW_TOKENS = 8


@dataclass
class PartResult:
    """One part of the smoke step: `status` PASS, FAIL or SKIP, its seconds, and what it found or why it failed."""

    name: str
    status: str
    seconds: float
    detail: str


def smoke_config(model_dir: str) -> Any:
    """A CPU, float32 config for one policy rank and one `hf` engine on `model_dir`."""
    from skyrl_train.config import SkyRLConfig

    return SkyRLConfig.from_cli_overrides(
        [
            "trainer.device=cpu",
            f"trainer.policy.model.path={model_dir}",
            "trainer.placement.colocate_all=false",
            "trainer.policy.fsdp.mixed_precision.param_dtype=float32",
            "trainer.policy.gradient_checkpointing=false",
            "trainer.policy.optimizer.lr=1e-3",
            "trainer.algorithm.use_kl_loss=false",
            "trainer.micro_train_batch_size_per_gpu=8",
            "trainer.micro_forward_batch_size_per_gpu=8",
            "generator.inference_engine.backend=hf",
            "generator.inference_engine.model_dtype=float32",
            f"generator.n_samples_per_prompt={SAMPLES_PER_PROMPT}",
        ],
        validate=False,
    )


class SmokeStep:
    """Runs the parts in order and collects their results; `progress(text)` is told which part is running."""

    def __init__(
        self, use_ray: bool = True, model_dir: Optional[str] = None, progress: Callable[[str], None] = lambda _: None
    ) -> None:
        self.use_ray = use_ray
        self.given_model = model_dir
        self.progress = progress
        self.results: list[PartResult] = []
        self.model_dir: Optional[str] = None
        self.cfg: Any = None
        self.engine: Any = None
        self.engine_handle: Any = None
        self.policy: Any = None
        self.output: Any = None
        self.ray_started = False
        self.process_group_started = False
        self._temp: Optional[str] = None

    def part_names(self) -> list[str]:
        """The parts this run will report, in order."""
        return ["model"] + (["ray"] if self.use_ray else []) + ["actors", "generate", "train"]

    def run(self) -> list[PartResult]:
        """Run every part (skipping those whose input failed), release everything, return the results."""
        steps = {
            "model": self.build_model,
            "ray": self.start_ray,
            "actors": self.start_actors,
            "generate": self.generate,
            "train": self.train,
        }
        try:
            failed: Optional[str] = None
            for name in self.part_names():
                self.progress(name)
                if failed is not None:
                    self.results.append(PartResult(name, "SKIP", 0.0, f"{failed} failed"))
                    continue
                started = time.perf_counter()
                try:
                    detail = steps[name]()
                    self.results.append(PartResult(name, "PASS", time.perf_counter() - started, detail))
                except Exception as exc:  # every failure becomes a FAIL line with its reason
                    where = traceback.extract_tb(exc.__traceback__)[-1]
                    reason = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
                    self.results.append(PartResult(name, "FAIL", time.perf_counter() - started, reason))
                    failed = name
        finally:
            self.close()
        return self.results

    # ----- parts --------------------------------------------------------------------------------------------------
    def build_model(self) -> str:
        """Save the tiny model and char tokenizer in a temp folder (or check the given folder exists)."""
        if self.given_model is not None:
            self.model_dir = self.given_model
            self.cfg = smoke_config(self.model_dir)
            return f"using {self.model_dir}"
        from skyrl_train.models.tiny import TinyModelSpec, build_tiny_model
        from skyrl_train.models.tokenizer import build_char_tokenizer, save_tokenizer

        self._temp = tempfile.mkdtemp(prefix="skyrl-doctor-")
        model = build_tiny_model(TinyModelSpec(size=1), seed=0)
        model.save_pretrained(self._temp)
        save_tokenizer(build_char_tokenizer(), self._temp)
        self.model_dir = self._temp
        self.cfg = smoke_config(self.model_dir)
        parameters = sum(p.numel() for p in model.parameters())
        return f"tiny qwen2, {parameters / 1e6:.2f} M parameters, in {self.model_dir}"

    def start_ray(self) -> str:
        """Start a local 2-CPU Ray cluster (this process's own; RAY_ADDRESS is ignored)."""
        import ray

        if not ray.is_initialized():
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            self.ray_started = True
        return f"ray {ray.__version__}, {ray.cluster_resources().get('CPU', 0):g} CPUs"

    def start_actors(self) -> str:
        """The hf engine and a one-rank policy: Ray actors, or objects in this process with `--no-ray`."""
        from skyrl_train.inference.ray_engine import ENGINE_BUILDERS, EngineActor, EngineSettings, RayEngineProxy
        from skyrl_train.workers import PolicyWorker

        settings = EngineSettings.from_config(self.cfg, self.model_dir, num_threads=1)
        if not self.use_ray:
            self.engine = ENGINE_BUILDERS.get("hf")(settings)
            self.process_group_started = True
            self.policy = PolicyWorker("policy", 0, 1, None, None, self.cfg, num_threads=1)
            self.policy.init_model()
            return "hf engine and PolicyWorker (FSDP2 over gloo, world size 1) in this process"
        import ray

        from skyrl_train.workers.group import WorkerGroup

        handle = ray.remote(EngineActor).options(num_cpus=1, num_gpus=0).remote(settings)  # starts meanwhile
        self.engine_handle = handle
        self.policy = WorkerGroup("policy", PolicyWorker, 1, self.cfg, num_cpus_per_worker=1)
        self.policy.init_model()
        info = ray.get(handle.engine_info.remote())
        self.engine = RayEngineProxy(handle, info["weight_version"])
        return "EngineActor (hf) and a 1-rank PolicyWorker group (FSDP2 over gloo) on Ray"

    def generate(self) -> str:
        """One generate call: every prompt sampled twice with the engine's log-probs."""
        from skyrl_train.generators.chat import prompt_token_ids
        from skyrl_train.inference.types import InferenceEngineInput, SamplingParams
        from skyrl_train.models.loading import load_tokenizer

        tokenizer = load_tokenizer(self.model_dir)
        prompt_ids = [prompt_token_ids(tokenizer, [{"role": "user", "content": text}]) for text in PROMPTS]
        request = InferenceEngineInput(
            prompt_token_ids=prompt_ids,
            sampling_params=SamplingParams(max_tokens=MAX_NEW_TOKENS, n=SAMPLES_PER_PROMPT, seed=0, logprobs=True),
        )
        output = asyncio.run(self.engine.generate(request))
        expected = len(PROMPTS) * SAMPLES_PER_PROMPT
        if len(output.response_ids) != expected or not all(output.response_ids):
            raise RuntimeError(f"expected {expected} non-empty responses, got {[len(r) for r in output.response_ids]}")
        logprobs = [value for row in output.response_logprobs or [] for value in row]
        tokens = sum(len(row) for row in output.response_ids)
        if len(logprobs) != tokens or not all(math.isfinite(v) and v <= 0 for v in logprobs):
            raise RuntimeError(f"the engine's log-probs are missing or invalid ({len(logprobs)} for {tokens} tokens)")
        self.output = (prompt_ids, output, tokenizer.pad_token_id)
        return f"{expected} samples, {tokens} tokens, e.g. {output.responses[0]!r}"

    def train(self) -> str:
        """forward (old log-probs), forward_backward with GRPO advantages, optim_step."""
        import torch

        from skyrl_train.algorithms import compute_advantages
        from skyrl_train.generators.types import Trajectory
        from skyrl_train.training_batch import TrainingBatch

        prompt_ids, output, pad_id = self.output
        trajectories = []
        for row, response in enumerate(output.response_ids):
            reward = float(row % 2)  # made-up 0/1 rewards: each prompt's two samples differ
            trajectories.append(
                Trajectory(
                    uid=str(row // SAMPLES_PER_PROMPT),
                    env_class="doctor",
                    prompt_token_ids=prompt_ids[row // SAMPLES_PER_PROMPT],
                    response_ids=list(response),
                    loss_mask=[1] * len(response),
                    token_rewards=[0.0] * (len(response) - 1) + [reward],
                    rollout_logprobs=list(output.response_logprobs[row]),
                    stop_reason=output.stop_reasons[row],
                    num_turns=1,
                    weight_version=0,
                )
            )
        batch = TrainingBatch.from_trajectories(trajectories, pad_id)
        advantages, _ = compute_advantages(
            "grpo", token_level_rewards=batch.token_rewards, response_mask=batch.loss_mask, index=batch.uids
        )
        if self.use_ray:
            old = self.policy.run_sharded("forward", batch)
            metrics = self.policy.run_sharded("forward_backward", batch, advantages=advantages, old_logprobs=old)
            grad_norm = float(self.policy.run_all("optim_step")[0])
        else:
            old = self.policy.forward(batch)
            metrics = self.policy.forward_backward(batch, advantages, old)
            grad_norm = float(self.policy.optim_step())
        difference = float(((old - batch.rollout_logprobs).abs() * batch.loss_mask).sum() / batch.loss_mask.sum())
        loss = float(metrics["policy/loss"])
        if not (math.isfinite(loss) and math.isfinite(grad_norm) and grad_norm > 0):
            raise RuntimeError(f"policy update gave loss {loss} and grad norm {grad_norm}; expected finite, norm > 0")
        if not torch.isfinite(old).all():
            raise RuntimeError("the policy's forward returned non-finite log-probs")
        return f"loss {loss:.4f}, grad norm {grad_norm:.4f}, |trainer - engine| logprob {difference:.1e}"

    # ----- clean-up -----------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill the actors, stop the Ray cluster or process group this step started, delete the temp model."""
        try:
            if self.use_ray:
                import ray

                if self.policy is not None:
                    self.policy.shutdown()
                if self.engine_handle is not None:
                    ray.kill(self.engine_handle)
                if self.ray_started:
                    ray.shutdown()
            elif self.process_group_started:
                import torch.distributed as dist

                if dist.is_initialized():
                    dist.destroy_process_group()
        finally:
            if self._temp is not None:
                shutil.rmtree(self._temp, ignore_errors=True)


def run_smoke(use_ray: bool, model_dir: Optional[str] = None, show_progress: bool = True) -> dict[str, Any]:
    """Run the smoke step with a progress bar on stderr; returns `{ran, mode, passed, seconds, parts: [...]}`."""
    from tqdm import tqdm

    step = SmokeStep(use_ray=use_ray, model_dir=model_dir)
    names = step.part_names()
    started = time.perf_counter()
    with tqdm(total=len(names), desc="doctor smoke", unit="part", file=sys.stderr, disable=not show_progress) as bar:

        def progress(name: str) -> None:
            bar.n = names.index(name)
            bar.set_postfix_str(name)

        step.progress = progress
        results = step.run()
        bar.n = len(names)
        bar.set_postfix_str("done")
    return {
        "ran": True,
        "mode": "ray" if use_ray else "in-process",
        "device": "cpu",
        "passed": all(result.status == "PASS" for result in results),
        "seconds": round(time.perf_counter() - started, 2),
        "parts": [{**asdict(result), "seconds": round(result.seconds, 2)} for result in results],
    }
