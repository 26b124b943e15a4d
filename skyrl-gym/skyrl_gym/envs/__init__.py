"""Built-in environments, registered by id with lazy "module:Class" entry points."""

from skyrl_gym.envs.registration import register

_BUILTINS: dict[str, str] = {}

for _env_id, _entry_point in _BUILTINS.items():
    register(_env_id, _entry_point)
