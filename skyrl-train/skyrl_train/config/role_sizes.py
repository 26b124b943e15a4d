"""How many workers each role runs and which roles a run uses: the arithmetic validation, placement and the
automatic settings share."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skyrl_train.config.root import SkyRLConfig


def get_path(cfg: object, path: str) -> object:
    """The value at dotted `path` of a config object, e.g. `get_path(cfg, "trainer.seed")`."""
    value = cfg
    for name in path.split("."):
        value = getattr(value, name)
    return value


def role_world_size(cfg: "SkyRLConfig", role: str) -> int:
    """Worker processes of `role` (`policy`, `ref`, `critic` or `reward`): nodes times GPUs (or CPU workers) per
    node."""
    placement = cfg.trainer.placement
    return getattr(placement, f"{role}_num_nodes") * getattr(placement, f"{role}_num_gpus_per_node")


def role_data_parallel_size(cfg: "SkyRLConfig", role: str) -> int:
    """Data-parallel ranks of `role`: its world size divided by its sequence-parallel size, or on Megatron by its
    model-parallel size (tensor * pipeline * context)."""
    section = role_section(cfg, role)
    if cfg.trainer.strategy == "megatron" and hasattr(section, "megatron"):
        return max(1, role_world_size(cfg, role) // megatron_model_parallel_size(section.megatron))
    return role_world_size(cfg, role) // section.sequence_parallel_size


def megatron_model_parallel_size(megatron: object) -> int:
    """Ranks holding one copy of the model on Megatron: tensor * pipeline * context parallel sizes."""
    return megatron.tensor_model_parallel_size * megatron.pipeline_model_parallel_size * megatron.context_parallel_size


def role_section(cfg: "SkyRLConfig", role: str) -> object:
    """The config section of `role`: `trainer.<role>` for policy, ref and critic, `reward.model` for reward."""
    return cfg.reward.model if role == "reward" else getattr(cfg.trainer, role)


def trained_roles(cfg: "SkyRLConfig") -> list[str]:
    """The roles that train: the policy, and the critic when the algorithm needs one."""
    return ["policy", "critic"] if cfg.needs_critic else ["policy"]


def used_roles(cfg: "SkyRLConfig") -> list[str]:
    """The roles a run starts workers for: the trained ones, a separate reference model, a reward model."""
    return (
        trained_roles(cfg)
        + (["ref"] if cfg.needs_ref_model and not cfg.ref_is_policy_base else [])
        + (["reward"] if cfg.needs_reward_model else [])
    )
