"""`BasePPOExp`: builds every part of a training run from the config through overridable `get_*` hooks, then runs it.

    python -m skyrl_train.entrypoints.main_base trainer.policy.model.path=... data.train_data="['train.parquet']" ...

Library use: register your own envs, losses or estimators in your script, then `BasePPOExp(cfg).run()`; the training
loop runs in this (driver) process, so env registrations made here are the ones the generator uses, and
algorithm registrations are shipped to the workers. `run` checks every registry name of the config, loads the
datasets and checks the env classes their rows name, all before Ray starts.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Optional, TypeVar

import ray

from skyrl_train.algorithms.registry import export_user_registrations
from skyrl_train.config.auto_settings import resolve_auto_settings
from skyrl_train.config.errors import ConfigValidationError
from skyrl_train.config.registered_names import check_registered_names
from skyrl_train.config.root import SkyRLConfig
from skyrl_train.dataset import PromptDataset, StatefulDataLoader
from skyrl_train.generators import SkyRLGymGenerator
from skyrl_train.generators.base import GeneratorInterface
from skyrl_train.generators.from_config import generator_settings_from_config
from skyrl_train.inference.client import InferenceEngineClient
from skyrl_train.inference.ray_engine import EngineSettings, check_engine_backend, create_engine_actors
from skyrl_train.models.chat_templates import apply_chat_template_config
from skyrl_train.models.loading import load_tokenizer
from skyrl_train.placement import Placement, init_ray, plan_placement, role_layout
from skyrl_train.rewards.functions import load_reward_function
from skyrl_train.rewards.scorer import RewardScorer
from skyrl_train.trainer import RayPPOTrainer, TrainResult, optimizer_steps_per_training_step, total_training_steps
from skyrl_train.utils.checkpoint_io import local_directory_for_writing
from skyrl_train.utils.plots import plot_curves
from skyrl_train.utils.tracking import Tracker
from skyrl_train.weight_sync.node_aware import connect_weight_sync, describe_weight_sync
from skyrl_train.weight_sync.strategy import WEIGHT_SYNC_STRATEGIES
from skyrl_train.workers import CriticWorker, PolicyWorker, RefWorker, RewardModelWorker
from skyrl_train.workers.group import WorkerGroup
from skyrl_train.workers.lora_preflight import lora_model_problems
from skyrl_train.workers.strategy.megatron_preflight import megatron_model_problems

logger = logging.getLogger(__name__)
T = TypeVar("T")


async def _in_two_threads(first: Callable[[], Any], second: Callable[[], Any]) -> tuple[Any, Any]:
    """Run two blocking calls at once, each in a thread, and return both results; when either raised, raise the
    first one's error once both have ended (a thread cannot be cancelled: nothing runs on behind the error)."""
    results = await asyncio.gather(asyncio.to_thread(first), asyncio.to_thread(second), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results[0], results[1]


class BasePPOExp:
    """One experiment. Override a `get_*` hook to swap a part (dataset, generator, trainer, tracker, ...)."""

    def __init__(self, cfg: SkyRLConfig, verify_weight_sync: bool = False) -> None:
        # every `auto` speed setting is chosen once, here, from the model size, world size and device; the workers,
        # engines and generator get the chosen values
        self.cfg, self.auto_choices = resolve_auto_settings(cfg)
        for choice in self.auto_choices:
            logger.info("auto: %s=%s (%s)", choice.key, choice.value, choice.reason)
        self.verify_weight_sync = verify_weight_sync
        self.placement: Optional[Placement] = None
        self.groups: list[WorkerGroup] = []
        self.engines: list[Any] = []
        self.total_steps: Optional[int] = None
        """Training steps of the run; set by `prepare` (with the tokenizer, datasets and loader)."""
        self.reward_group: Optional[WorkerGroup] = None
        self.reward_scorer: Optional[RewardScorer] = None
        self.workflow: Optional[Any] = None
        """The rollout workflow `generator.workflow` names, built by `prepare` (so bad arguments fail before Ray)."""

    # ----- hooks --------------------------------------------------------------------------------------------------
    def roles(self) -> list[str]:
        """The worker roles this run needs: policy, plus ref when KL is used, critic and reward model when
        configured."""
        roles = ["policy"]
        if self.cfg.needs_ref_model and not self.cfg.ref_is_policy_base:
            roles.append("ref")
        if self.cfg.needs_critic:
            roles.append("critic")
        if self.cfg.needs_reward_model:
            roles.append("reward")
        return roles

    def get_tokenizer(self) -> Any:
        """The policy model's tokenizer, with the chat template `generator.chat_template` selects."""
        tokenizer = load_tokenizer(self.cfg.trainer.policy.model.path)
        return apply_chat_template_config(tokenizer, self.cfg.generator.chat_template)

    def _dataset(self, files: list[str], tokenizer: Any) -> PromptDataset:
        data = self.cfg.data
        unsupported = {}
        if not self.cfg.needs_reward_model:
            unsupported["reward_model"] = "no reward model is configured; set reward.model.path"
        return PromptDataset(
            files,
            tokenizer,
            data.max_prompt_length,
            default_env_class=self.cfg.environment.env_class,
            prompt_key=data.prompt_key,
            env_class_key=data.env_class_key,
            chat_template_kwargs=dict(self.cfg.generator.chat_template_kwargs),
            unsupported_reward_methods=unsupported,
        )

    def get_train_dataset(self, tokenizer: Any) -> PromptDataset:
        """Training prompts from `data.train_data`."""
        return self._dataset(list(self.cfg.data.train_data), tokenizer)

    def get_eval_items(self, tokenizer: Any) -> list[dict[str, Any]]:
        """Evaluation prompts from `data.val_data` (empty list: no evaluation)."""
        if not self.cfg.data.val_data:
            return []
        dataset = self._dataset(list(self.cfg.data.val_data), tokenizer)
        return [dataset[i] for i in range(len(dataset))]

    def get_train_loader(self, dataset: PromptDataset) -> StatefulDataLoader:
        """Batches of `train_batch_size` prompts, shuffled per epoch from `data.seed`."""
        return StatefulDataLoader(
            dataset, self.cfg.trainer.train_batch_size, shuffle=self.cfg.data.shuffle, seed=self.cfg.data.seed
        )

    def share_prompt_ids(self, generator: GeneratorInterface) -> None:
        """Hand the training prompts' chat-templated ids, which the dataset's length check computed with the run's
        tokenizer, to a generator that takes them (`remember_prompt_ids`): its first epoch then does not template
        those prompts again."""
        remember = getattr(generator, "remember_prompt_ids", None)
        templated = getattr(self.train_dataset, "templated_prompts", None)
        if remember is not None and templated is not None:
            remember(templated(), self.train_dataset.chat_template_kwargs)

    def get_placement(self) -> Placement:
        """Placement groups for the roles and engines."""
        return plan_placement(self.cfg, self.roles())

    def get_worker_groups(self, placement: Placement, total_steps: int):
        """Create and initialise the policy, ref and critic groups (None for roles not used), and the reward-model
        group (kept as `self.reward_group`) when `reward.model.path` is set."""
        classes = {"policy": PolicyWorker, "ref": RefWorker, "critic": CriticWorker, "reward": RewardModelWorker}
        paths = {
            "policy": self.cfg.trainer.policy.model.path,
            "ref": self.cfg.ref_model_path,
            "critic": self.cfg.trainer.critic.model.path,
            "reward": self.cfg.reward.model.path,
        }
        made: dict[str, WorkerGroup] = {}
        for role in self.roles():
            slot = placement.slots[role]
            made[role] = WorkerGroup(
                role,
                classes[role],
                role_layout(self.cfg, role).workers,
                self.cfg,
                placement_group=slot.placement_group,
                bundles=slot.bundles,
                num_cpus_per_worker=slot.num_cpus,
                num_gpus_per_worker=slot.num_gpus,
                num_threads=self.cfg.trainer.placement.num_threads_per_worker,
            )
        blob = export_user_registrations()
        for role, group in made.items():
            group.run_all("import_registries", blob)
            # decaying LR schedules count optimizer steps: several per training step with mini-batches / PPO epochs
            trained = role in ("policy", "critic")
            optimizer_steps = total_steps * optimizer_steps_per_training_step(self.cfg, role) if trained else None
            group.init_model(paths[role], optimizer_steps)
        self.groups = list(made.values())
        self.reward_group = made.get("reward")
        return made.get("policy"), made.get("ref"), made.get("critic")

    def get_reward_scorer(self, tokenizer: Any) -> Optional[RewardScorer]:
        """The scorer of `reward.*` (manager function, reward model, combine rule); None when the env's rewards are
        used as they are (`reward.manager: env` and no reward model)."""
        if self.cfg.reward.manager == "env" and self.reward_group is None:
            return None
        self.reward_scorer = RewardScorer.from_config(self.cfg, tokenizer, self.reward_group)
        return self.reward_scorer

    def engines_start_beside_workers(self) -> bool:
        """Whether `get_worker_groups` and `get_inference_engines` run at the same time (each in a thread of its own),
        so the engines' processes load their libraries and models while the workers' do. Not when they share GPUs
        (`colocate_all` on CUDA): an engine sizes its KV cache from the memory the workers' models left free."""
        return not (self.cfg.trainer.placement.colocate_all and self.cfg.resolved_device().startswith("cuda"))

    def get_inference_engines(self, placement: Placement) -> list[Any]:
        """Engine actors serving the policy's initial weights."""
        slot = placement.slots["engine"]
        self.engines = create_engine_actors(
            self.cfg.generator.inference_engine.num_engines,
            self.cfg.trainer.policy.model.path,
            self.cfg,
            placement_group=slot.placement_group,
            bundles=slot.bundles,
            num_cpus_per_engine=slot.num_cpus,
            num_gpus_per_engine=slot.num_gpus,
            num_threads=self.cfg.generator.inference_engine.num_threads,
        )
        return self.engines

    def get_inference_client(self, engines: list[Any]) -> InferenceEngineClient:
        """One client routing over the engines."""
        return InferenceEngineClient(engines)

    def get_generator(self, client: InferenceEngineClient, tokenizer: Any) -> GeneratorInterface:
        """The multi-turn skyrl-gym generator with the config's settings, or the generator of the rollout workflow
        `generator.workflow` names."""
        settings = generator_settings_from_config(self.cfg)
        if self.cfg.generator.workflow is not None:
            from skyrl_train.generators.workflow import make_workflow_generator

            generator = self.cfg.generator
            return make_workflow_generator(
                generator.workflow, client, tokenizer, settings, dict(generator.workflow_args), self.workflow
            )
        return SkyRLGymGenerator(client, tokenizer, settings)

    async def get_weight_sync(self, policy: WorkerGroup, engines: list[Any]):
        """The weight-sync strategy, connected between policy rank 0 and the engines (`connect_weight_sync`). `auto`
        picks per engine from where it runs: on a colocated run, engines on rank 0's node (CPU) or on rank 0's GPU
        take shm / CUDA IPC and every other engine the broadcast group; a named backend serves every engine once it
        was checked to reach them."""
        backend = self.cfg.generator.inference_engine.weight_sync_backend
        colocated, device = self.cfg.trainer.placement.colocate_all, self.cfg.resolved_device()
        # a named backend's own settings (e.g. `delta_weight_sync`); `auto` picks built-ins that need none
        options = {} if backend == "auto" else WEIGHT_SYNC_STRATEGIES.get(backend).options_from_config(self.cfg)
        strategy = await connect_weight_sync(
            backend, policy.actors[0], engines, colocated, device, compute_checksums=self.verify_weight_sync, **options
        )
        logger.info("weight sync: %s", describe_weight_sync(strategy))
        return strategy

    def get_tracker(self, total_steps: int) -> Tracker:
        """Metric tracking to the configured backends."""
        trainer = self.cfg.trainer
        backends = list(trainer.logger)
        # Only the console takes the run length (for its progress bar); options for a backend that is not in the
        # list are an error in Tracker, so a run that logs to e.g. only `jsonl` must not pass them.
        options = {"console": {"total_steps": total_steps}} if "console" in backends else {}
        return Tracker(
            backends,
            trainer.project_name,
            trainer.run_name,
            config=self.cfg.to_dict(),
            log_dir=os.path.expanduser(trainer.log_path),
            backend_options=options,
        )

    def start_http_endpoint(self, client: InferenceEngineClient, tokenizer: Any, trainer: Any) -> Optional[Any]:
        """With `generator.http_endpoint.enabled`: an OpenAI-compatible endpoint over the run's engines, sharing
        the trainer's `endpoint_gate` (requests wait while the weights change). None otherwise."""
        settings = self.cfg.generator.http_endpoint
        if not settings.enabled:
            return None
        from skyrl_train.serving import create_app
        from skyrl_train.serving.access import endpoint_access
        from skyrl_train.serving.background import BackgroundServer

        name = settings.served_model_name or f"skyrl/{self.cfg.trainer.run_name}"
        app = create_app(client, tokenizer, name, gate=trainer.endpoint_gate, access=endpoint_access(settings))
        self.http_endpoint = BackgroundServer(app, settings.host, settings.port).start()
        logger.info("OpenAI-compatible endpoint serving the policy as %r at %s", name, self.http_endpoint.url)
        return self.http_endpoint

    def get_trainer(self, **parts: Any) -> RayPPOTrainer:
        """The trainer (its loop follows `trainer.mode`); override to use another loop."""
        return RayPPOTrainer(self.cfg, verify_weight_sync=self.verify_weight_sync, **parts)

    # ----- run ----------------------------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Everything that needs no Ray: check the config's registry names, load the tokenizer and datasets, check
        the env classes of their rows, and count the run's steps (warning when the epochs end before
        `max_training_steps`). `run` calls it before starting Ray, so a wrong name or path, or an engine backend that
        cannot run here, fails in seconds."""
        check_registered_names(self.cfg)
        check_engine_backend(EngineSettings.from_config(self.cfg, self.cfg.trainer.policy.model.path or ""))
        model_problems = lora_model_problems(self.cfg) + megatron_model_problems(self.cfg)
        if model_problems:
            raise ConfigValidationError(model_problems)
        if self.cfg.generator.http_endpoint.enabled:
            from skyrl_train.serving.access import endpoint_access

            endpoint_access(self.cfg.generator.http_endpoint)  # an unset key variable fails before Ray starts
        self.tokenizer = self.get_tokenizer()
        self.train_dataset = self.get_train_dataset(self.tokenizer)
        self.train_loader = self.get_train_loader(self.train_dataset)
        self.eval_items = self.get_eval_items(self.tokenizer)
        uses = {
            name: f"train data, {count} row(s), first uid {uid}"
            for name, (count, uid) in self.train_dataset.env_class_uses().items()
        }
        for item in self.eval_items:
            uses.setdefault(item["env_class"], f"eval data, uid {item['uid']}")
        check_registered_names(self.cfg, uses)
        if self.cfg.generator.workflow is not None:  # its arguments (a config file, say) are checked before Ray
            from skyrl_train.generators.workflow import make_workflow

            self.workflow = make_workflow(self.cfg.generator.workflow, dict(self.cfg.generator.workflow_args))
        self.total_steps = total_training_steps(self.cfg, self.train_loader)
        warn_if_epochs_end_first(self.cfg, len(self.train_loader))

    async def _run(self) -> TrainResult:
        if self.total_steps is None:
            self.prepare()
        tokenizer, loader = self.tokenizer, self.train_loader
        eval_items, total_steps = self.eval_items, self.total_steps
        trainer_cfg = self.cfg.trainer
        self.placement = self.get_placement()
        if self.engines_start_beside_workers():
            (policy, ref, critic), engines = await _in_two_threads(
                lambda: self.get_worker_groups(self.placement, total_steps),
                lambda: self.get_inference_engines(self.placement),
            )
        else:
            policy, ref, critic = self.get_worker_groups(self.placement, total_steps)
            engines = self.get_inference_engines(self.placement)
        client = self.get_inference_client(engines)
        generator = self.get_generator(client, tokenizer)
        self.share_prompt_ids(generator)
        weight_sync = await self.get_weight_sync(policy, engines)
        tracker = self.get_tracker(total_steps)
        reward_scorer = self.get_reward_scorer(tokenizer)
        trainer = self.get_trainer(
            tokenizer=tokenizer,
            train_loader=loader,
            eval_items=eval_items,
            policy=policy,
            ref=ref,
            critic=critic,
            client=client,
            generator=generator,
            weight_sync=weight_sync,
            tracker=tracker,
            reward_scorer=reward_scorer,
        )
        endpoint = self.start_http_endpoint(client, tokenizer, trainer)
        try:
            result = await trainer.train()
        finally:
            tracker.finish()
            if hasattr(generator, "close"):
                generator.close()
            if endpoint is not None:
                endpoint.stop()
        self.trainer = trainer
        export_root = os.path.expanduser(trainer_cfg.export_path)
        with local_directory_for_writing(export_root) as local:  # an fsspec URL is written locally, then uploaded
            title = f"{trainer_cfg.project_name} / {trainer_cfg.run_name}"
            plot_curves(result.history, os.path.join(local, "curves.png"), title=title)
        self.plot_path = os.path.join(export_root, "curves.png")
        return result

    def run(self) -> TrainResult:
        """Check names and load the data (`prepare`), start (or join) Ray, build everything, train, and release the
        actors."""
        return self._launch(self._run)

    def _launch(self, main: Callable[[], Awaitable[T]]) -> T:
        """`prepare`, start (or join) Ray, run `main` to completion, and release the actors (`shutdown`) however it
        ends: every entry point's frame around its own work."""
        if self.cfg.reward.function:
            load_reward_function(self.cfg.reward.function)  # a wrong path or name fails before Ray starts
        self.prepare()
        init_ray(self.cfg, self.roles(), address=self.cfg.trainer.placement.ray_address)
        try:
            return asyncio.run(main())
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Kill this run's actors, scoring processes and placement groups (Ray itself keeps running)."""
        if self.reward_scorer is not None:
            self.reward_scorer.close()
        for group in self.groups:
            group.shutdown()
        for engine in self.engines:
            ray.kill(engine.handle)
        if self.placement is not None:
            self.placement.remove()


def warn_if_epochs_end_first(cfg: SkyRLConfig, batches_per_epoch: int) -> Optional[str]:
    """Log (and return) a warning when `trainer.max_training_steps` exceeds `trainer.epochs` x batches per epoch:
    the run then stops when the epochs end, before the asked-for step count."""
    cap, epochs = cfg.trainer.max_training_steps, cfg.trainer.epochs
    available = epochs * batches_per_epoch
    if cap is None or cap <= available:
        return None
    needed = -(-cap // max(batches_per_epoch, 1))
    message = (
        f"trainer.max_training_steps={cap} is more than trainer.epochs ({epochs}) x {batches_per_epoch} batches per"
        f" epoch = {available} steps: the run stops after {available} steps, when the epochs end. Set"
        f" trainer.epochs={needed} to reach {cap} steps, or lower trainer.max_training_steps"
    )
    logger.warning(message)
    return message


def run_experiment(cfg: SkyRLConfig) -> TrainResult:
    """Train with `BasePPOExp` and log where the results went."""
    experiment = BasePPOExp(cfg)
    result = experiment.run()
    logger.info(
        "finished %d steps; final eval %s; curves at %s", result.global_step, result.final_eval, experiment.plot_path
    )
    return result


def main(
    argv: Optional[list[str]] = None, upstream_module: bool = False, extra_overrides: tuple[str, ...] = ()
) -> None:
    """Command-line entry: Hydra-style overrides; `--dry-run` prints the resolved config and exits.

    `upstream_module` and `extra_overrides` are for NovaSky-AI/SkyRL's module paths (`upstream_modules.py`)."""
    from skyrl_train.config.cli import run_cli

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_cli(run_experiment, argv, upstream_module=upstream_module, extra_overrides=extra_overrides)


if __name__ == "__main__":
    main()
