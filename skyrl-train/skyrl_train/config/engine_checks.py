"""Validation checks of the generator, its inference engines and where they run: engine settings, placement
(colocation shares GPUs, so sizes must match), weight-sync transports and engine tensor parallelism.

They are part of `validation.ERROR_CHECKS`; each yields what is wrong and what to change.
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING

from skyrl_train.config.role_sizes import role_world_size, used_roles

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig


def check_generator(cfg: "SkyRLConfig") -> Iterator[str]:
    """Batched generation is single-turn and not step-wise; remote engines have URLs; lengths are consistent."""
    generator = cfg.generator
    if generator.batched is True and generator.max_turns != 1:
        yield (
            f"generator.batched=true needs generator.max_turns=1 (got {generator.max_turns}): batched generation is"
            " single-turn, set batched=false for multi-turn rollouts"
        )
    if generator.batched is True and generator.workflow not in (None, "env"):
        yield (
            f"generator.batched=true has no effect with generator.workflow={generator.workflow}: the workflow runs each"
            " episode itself; set batched=false"
        )
    if generator.workflow_args and generator.workflow is None:
        yield (
            f"generator.workflow_args={dict(generator.workflow_args)} needs generator.workflow: they are the "
            "arguments of that workflow's constructor"
        )
    if generator.batched is True and generator.step_wise_trajectories:
        yield ("generator.step_wise_trajectories=true does not work with generator.batched=true: set batched=false")
    if not generator.use_conversation_multi_turn and generator.step_wise_trajectories:
        yield (
            "generator.use_conversation_multi_turn=false does not work with generator.step_wise_trajectories=true (a"
            " step's prompt is the conversation so far as chat messages): set one of them back"
        )
    if generator.retokenize_chat_history and not generator.step_wise_trajectories:
        yield (
            "generator.retokenize_chat_history=true needs generator.step_wise_trajectories=true: each turn's prompt is"
            " templated anew, so only step-wise samples (one per turn) can be trained on them"
        )
    if generator.retokenize_chat_history and generator.workflow not in (None, "env"):
        yield (
            f"generator.retokenize_chat_history=true has no effect with generator.workflow={generator.workflow}: the"
            " workflow builds each episode's tokens itself; remove it"
        )
    if not generator.use_conversation_multi_turn and generator.workflow not in (None, "env"):
        yield (
            f"generator.use_conversation_multi_turn=false has no effect with generator.workflow={generator.workflow}:"
            " the workflow builds each episode's tokens itself; remove it"
        )
    engine = generator.inference_engine
    if engine.backend == "remote":
        if not engine.remote_urls:
            yield "generator.inference_engine.backend=remote needs remote_urls, e.g. [http://127.0.0.1:8000]"
        elif engine.num_engines != len(engine.remote_urls):
            yield (
                f"generator.inference_engine.num_engines={engine.num_engines} but remote_urls has"
                f" {len(engine.remote_urls)} URLs: the remote backend runs one engine per URL, set them equal"
            )
        if cfg.trainer.policy.model.lora.rank > 0:
            yield (
                "trainer.policy.model.lora.rank > 0 with generator.inference_engine.backend=remote: adapter-only"
                " weight sync into remote servers is not supported here yet; use backend=vllm or hf, or lora.rank=0"
            )
    elif engine.remote_urls:
        yield (
            f"generator.inference_engine.remote_urls is set but backend={engine.backend}: the URLs are only read by"
            " backend=remote"
        )
    expert = engine.expert_parallel_size
    if expert != 1 and expert != engine.tensor_parallel_size:
        yield (
            f"generator.inference_engine.expert_parallel_size={expert} must be 1 or equal tensor_parallel_size"
            f" ({engine.tensor_parallel_size}): an engine's experts spread over its data x tensor ranks, and an engine"
            " has one data-parallel replica here"
        )
    if expert > 1 and engine.backend not in ("vllm", "sglang"):
        yield (
            f"generator.inference_engine.expert_parallel_size={expert} needs backend=vllm or sglang (GPU engines with"
            f" expert parallelism); backend={engine.backend} runs every expert on each engine"
        )
    if engine.backend == "sglang" and cfg.trainer.device == "cpu":
        yield "generator.inference_engine.backend=sglang needs a GPU: use backend=vllm or hf with trainer.device=cpu"
    if generator.max_input_length is not None and generator.max_input_length < cfg.data.max_prompt_length:
        yield (
            f"generator.max_input_length ({generator.max_input_length}) is shorter than data.max_prompt_length"
            f" ({cfg.data.max_prompt_length}): raise it or set it to null"
        )


def check_placement(cfg: "SkyRLConfig") -> Iterator[str]:
    """Colocation shares one GPU pool: the engines fill the policy's GPUs, another role fits in them (it takes the
    first of the policy's bundles); IPC/shm sync needs colocation."""
    engine = cfg.generator.inference_engine
    policy_workers = role_world_size(cfg, "policy")
    if cfg.trainer.placement.colocate_all:
        if engine.backend == "remote":
            yield (
                "trainer.placement.colocate_all=true cannot share GPUs with remote engines"
                " (generator.inference_engine.backend=remote): set colocate_all=false"
            )
        else:
            engine_gpus = engine.num_engines * engine.tensor_parallel_size
            if engine_gpus != policy_workers:
                yield (
                    f"trainer.placement.colocate_all=true needs as many engine GPUs (num_engines * tensor_parallel_size"
                    f" = {engine.num_engines} * {engine.tensor_parallel_size} = {engine_gpus}) as policy GPUs"
                    f" (policy_num_nodes * policy_num_gpus_per_node = {policy_workers}): change one of them or set"
                    " colocate_all=false"
                )
        for role in used_roles(cfg):
            if role != "policy" and role_world_size(cfg, role) > policy_workers:
                yield (
                    f"trainer.placement.colocate_all=true needs the {role} on at most as many GPUs as the policy"
                    f" ({role_world_size(cfg, role)} vs {policy_workers}): a colocated role runs on the first of the"
                    f" policy's bundles; lower trainer.placement.{role}_num_nodes * {role}_num_gpus_per_node or set"
                    " colocate_all=false"
                )
    sync = engine.weight_sync_backend
    if sync in ("cuda_ipc", "shm") and not cfg.trainer.placement.colocate_all:
        yield (
            f"generator.inference_engine.weight_sync_backend={sync} only works when trainer and engines share"
            " machines' memory: set trainer.placement.colocate_all=true or use broadcast/checkpoint"
        )
    if sync == "cuda_ipc" and cfg.trainer.device == "cpu":
        yield "generator.inference_engine.weight_sync_backend=cuda_ipc needs CUDA: use shm with trainer.device=cpu"
    if sync == "delta":
        yield from _check_delta(engine.delta_weight_sync)
    yield from check_gpu_weight_sync(cfg)


def _check_delta(delta: object) -> Iterator[str]:
    """The `delta` weight sync's folder is one the engines' processes can read, and its sizes are positive."""
    prefix = "generator.inference_engine.delta_weight_sync"
    if delta.sync_dir is not None and str(delta.sync_dir).startswith("memory://"):
        yield (
            f"{prefix}.sync_dir={delta.sync_dir}: a memory:// folder lives in one process, and the engines run in"
            " others: use a folder (shared across machines) or a bucket URL"
        )
    if not delta.max_file_size_in_gb > 0:
        yield f"{prefix}.max_file_size_in_gb must be positive, got {delta.max_file_size_in_gb}"
    if delta.cloud_download_workers < 1:
        yield f"{prefix}.cloud_download_workers must be at least 1, got {delta.cloud_download_workers}"
    if delta.publish_num_workers is not None and delta.publish_num_workers < 1:
        yield f"{prefix}.publish_num_workers must be null (min(8, CPUs)) or at least 1, got {delta.publish_num_workers}"


def check_gpu_weight_sync(cfg: "SkyRLConfig") -> Iterator[str]:
    """On a colocated GPU run, Ray shows each actor only its own bundle's GPU: `cuda_ipc` reaches only the engine on
    policy rank 0's GPU, and `broadcast` cannot serve that engine (NCCL refuses two ranks of one group on one GPU).
    `auto` gives each engine the transport that reaches it (`weight_sync.locations.plan_weight_sync`)."""
    engine = cfg.generator.inference_engine
    if not cfg.trainer.placement.colocate_all or engine.backend == "remote" or cfg.trainer.device == "cpu":
        return
    if cfg.trainer.device == "auto" and cfg.resolved_device() != "cuda":
        return
    policy_gpus = role_world_size(cfg, "policy")
    if engine.weight_sync_backend == "cuda_ipc" and policy_gpus > 1:
        yield (
            f"generator.inference_engine.weight_sync_backend=cuda_ipc with {policy_gpus} colocated GPUs: only the"
            " engine on policy rank 0's GPU can open its CUDA IPC handles (Ray shows each actor only its own GPU);"
            " use weight_sync_backend=auto (cuda_ipc for that engine, an NCCL broadcast group for the others)"
        )
    if engine.weight_sync_backend == "broadcast":
        yield (
            "generator.inference_engine.weight_sync_backend=broadcast with trainer.placement.colocate_all=true on"
            " GPUs puts engine 0 on policy rank 0's GPU, and NCCL refuses two ranks of one group on one GPU: use"
            " weight_sync_backend=auto (cuda_ipc for that engine, broadcast for the others) or colocate_all=false"
        )


def check_engine_tensor_parallel(cfg: "SkyRLConfig") -> Iterator[str]:
    """Where an engine can shard its model over `tensor_parallel_size` GPUs: vllm on GPUs (its ranks run as Ray
    workers of vLLM's Ray executor, one per one-GPU bundle; colocated, engine i spans policy ranks i*tp..i*tp+tp-1's
    bundles, on one node or several: `warn_engine_spanning_nodes`) and sglang in a separate placement (its actor holds a bundle of tp GPUs).
    The hf engine and vLLM on CPU run on one device."""
    engine = cfg.generator.inference_engine
    tp = engine.tensor_parallel_size
    key = "generator.inference_engine.tensor_parallel_size"
    if tp <= 1:
        return
    if engine.backend == "hf":
        yield (
            f"{key}={tp} with backend=hf is not supported here: the hf engine runs on one device; use"
            f" tensor_parallel_size=1 (num_engines={engine.num_engines * tp} gives the same GPUs as engines) or"
            " backend=vllm on GPUs"
        )
    elif engine.backend == "vllm" and cfg.trainer.device == "cpu":
        yield (
            f"{key}={tp} with backend=vllm on trainer.device=cpu is not supported here: vLLM's tensor parallelism"
            f" needs one GPU per rank; use tensor_parallel_size=1 (num_engines={engine.num_engines * tp}) on CPU"
        )
    elif engine.backend == "sglang" and cfg.trainer.placement.colocate_all:
        yield (
            f"{key}={tp} with backend=sglang and trainer.placement.colocate_all=true is not supported here: a"
            " colocated sglang engine's actor sees one GPU, and SGLang starts its tensor-parallel workers on the GPUs"
            f" its actor sees; set colocate_all=false (each sglang engine then gets {tp} GPUs), tensor_parallel_size=1"
            " or backend=vllm"
        )


def check_engine_quantization(cfg: "SkyRLConfig") -> Iterator[str]:
    """vLLM's fp8 quantization (`engine_init_kwargs.quantization=fp8`) on `trainer.device=cpu`: vLLM's CPU build has
    no fp8 kernels (`auto` passes: a GPU script's dry-run on a machine without one)."""
    engine = cfg.generator.inference_engine
    quantization = str(engine.engine_init_kwargs.get("quantization") or "")
    if engine.backend == "vllm" and cfg.trainer.device == "cpu" and quantization.startswith("fp8"):
        yield (
            f"generator.inference_engine.engine_init_kwargs.quantization={quantization} with trainer.device=cpu is not"
            " supported here: vLLM's fp8 kernels need CUDA GPUs (its CPU build has none); drop the quantization on CPU"
        )


def warn_engine_spanning_nodes(cfg: "SkyRLConfig") -> Iterator[str]:
    """A colocated vllm engine whose tensor-parallel ranks cannot all sit on one node: ranks take the bundles grouped
    by node (`placement.node_ordered_bundles`), so engine i's ranks i*tp..i*tp+tp-1 cross a node boundary exactly
    when `tensor_parallel_size` does not divide `policy_num_gpus_per_node`. vLLM's Ray executor runs such an engine
    (SkyRL's 235B scripts do, with 16 on nodes of 8), its all-reduces crossing the network every layer: said once."""
    engine = cfg.generator.inference_engine
    placement = cfg.trainer.placement
    tp, per_node = engine.tensor_parallel_size, placement.policy_num_gpus_per_node
    if not placement.colocate_all or engine.backend != "vllm" or cfg.resolved_device() != "cuda":
        return
    if tp > 1 and placement.policy_num_nodes > 1 and per_node % tp:
        yield (
            f"generator.inference_engine.tensor_parallel_size={tp} with trainer.placement.colocate_all=true and"
            f" policy_num_gpus_per_node={per_node}: some engines' tensor-parallel ranks span two nodes, and vLLM's"
            " all-reduces then cross the network every layer (slower than within a node); a tensor_parallel_size"
            f" that divides {per_node} keeps each engine on one node"
        )


def warn_narrow_colocated_roles(cfg: "SkyRLConfig") -> Iterator[str]:
    """A colocated role on fewer GPUs than the policy runs on the first of them, sharded over fewer GPUs than the
    policy is (SkyRL's behaviour): said once, since a forgotten `<role>_num_gpus_per_node` (default 1) puts a whole
    model on one GPU."""
    if not cfg.trainer.placement.colocate_all:
        return
    policy_workers = role_world_size(cfg, "policy")
    for role in used_roles(cfg):
        workers = role_world_size(cfg, role)
        if role != "policy" and workers < policy_workers:
            yield (
                f"trainer.placement.colocate_all=true: the {role} runs on {workers} of the policy's {policy_workers}"
                f" GPUs (trainer.placement.{role}_num_nodes * {role}_num_gpus_per_node), the first {workers}; set"
                f" them like the policy's to shard the {role} over all of them"
            )
