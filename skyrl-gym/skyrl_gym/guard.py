"""Run an env step so that a raise, a hang or a malformed output becomes a failed step with the reason, never a
silent zero reward."""

from __future__ import annotations

import concurrent.futures
import traceback
from typing import Any, Optional

from skyrl_gym.envs.base_text_env import BaseTextEnvStepOutput, check_step_output, final_step
from skyrl_gym.errors import EnvOutputError

_pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="skyrl-gym-guard")


def failed_step(reason: str, kind: str, detail: Optional[str] = None) -> BaseTextEnvStepOutput:
    """A terminal step that records why the env failed: metadata `env_error` = {kind, reason, detail}."""
    return final_step(0.0, {"env_error": {"kind": kind, "reason": reason, "detail": detail}})


def guarded_step(env: Any, action: str, timeout_s: Optional[float] = None) -> BaseTextEnvStepOutput:
    """Call `env.step(action)`; return its validated output, or a `failed_step` on exception, timeout or bad output.

    A failed step has `done=True`, reward 0.0 and `metadata["env_error"]` naming the kind (`exception`, `timeout`,
    `malformed_output`) and the reason, so a trainer can count and report it instead of learning from it. A hung
    step keeps running in its worker thread (Python cannot kill a thread); its result is discarded.
    """
    name = type(env).__name__
    future = _pool.submit(env.step, action)
    try:
        output = future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        return failed_step(f"{name}.step did not return within {timeout_s} s", "timeout")
    except Exception as exc:
        detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        kind = "malformed_output" if isinstance(exc, EnvOutputError) else "exception"
        return failed_step(f"{name}.step raised {type(exc).__name__}: {exc}", kind, detail)
    try:
        return check_step_output(output, name)
    except EnvOutputError as exc:
        return failed_step(str(exc), "malformed_output")
