"""Run untrusted Python programs in a layered subprocess sandbox (rlimits, namespaces, Landlock, audit hook).

`run_python(source, stdin, limits)` returns a `SandboxResult` that also records which defence layers were active;
`sandbox_capabilities()` says which layers this machine supports.
"""

from skyrl_gym.sandbox.capabilities import sandbox_capabilities
from skyrl_gym.sandbox.launch import run_python
from skyrl_gym.sandbox.limits import ALL_LAYERS, SandboxLimits
from skyrl_gym.sandbox.result import SandboxResult

__all__ = ["ALL_LAYERS", "SandboxLimits", "SandboxResult", "run_python", "sandbox_capabilities"]
