"""The python tool group: real sandboxed runs, what the model reads for each outcome, and sandbox failures."""

import pytest

from skyrl_gym.sandbox import SandboxLimits
from skyrl_gym.tools import Toolbox
from skyrl_gym.tools.python import DEFAULT_TIMEOUT_S, NO_OUTPUT, PythonToolGroup, clip_text

pytestmark = pytest.mark.integration


def run(code, **kwargs):
    return PythonToolGroup(**kwargs).call("python", {"code": code})


def test_schema_and_default_limits():
    group = PythonToolGroup()
    assert group.name == "sandbox" and group.get_tool_names() == ["python"]
    assert group.get_tool("python").parameters["required"] == ["code"]
    assert group.limits.timeout_s == DEFAULT_TIMEOUT_S == 10.0
    toolbox = Toolbox()
    toolbox.add_group(group)
    assert toolbox.qualified_names() == ["sandbox__python"]


def test_stdout_is_returned_without_trailing_whitespace():
    result = run("print(6 * 7)\nprint('done')\n\n")
    assert result.ok and result.output == "42\ndone" and result.text == "42\ndone"
    assert not result.service_error and result.data.exit_code == 0


def test_stderr_of_a_successful_run_is_shown_after_stdout():
    result = run("import sys\nprint('out')\nprint('careful', file=sys.stderr)")
    assert result.ok and result.output == "out\n[stderr]\ncareful"


def test_a_silent_program_says_so():
    result = run("x = 1")
    assert result.ok and result.output == NO_OUTPUT


def test_each_call_is_a_fresh_process():
    group = PythonToolGroup()
    assert group.call("python", {"code": "x = 5\nprint(x)"}).output == "5"
    second = group.call("python", {"code": "print(x)"})
    assert not second.ok and "NameError: name 'x' is not defined" in second.error


def test_an_exception_shows_the_traceback_and_earlier_output():
    result = run("print('before')\ndef f():\n    raise ValueError('bad input')\nf()")
    assert not result.ok and not result.service_error
    assert result.error.startswith("the program exited with code 1:\nTraceback (most recent call last):")
    assert 'File "main.py", line 3, in f' in result.error and "ValueError: bad input" in result.error
    assert result.error.endswith("[stdout before the failure]\nbefore")
    assert result.text.startswith("Error: the program exited with code 1")


def test_exit_code_without_traceback():
    result = run("import sys\nsys.exit(3)")
    assert not result.ok and result.error == "the program exited with code 3"


def test_limits_are_named():
    slow = run("while True:\n    pass", limits=SandboxLimits(timeout_s=1.0))
    assert not slow.ok and slow.error == "the program exceeded the time limit of 1 s"
    greedy = run("x = bytearray(3 * 1024 ** 3)", limits=SandboxLimits(memory_mb=200))
    assert not greedy.ok and greedy.error.startswith("the program exceeded the memory limit:")
    assert "MemoryError" in greedy.error
    loud = run("while True:\n    print('spam' * 100)", limits=SandboxLimits(max_output_bytes=2048))
    assert not loud.ok and loud.error.startswith("the program's output exceeded 2048 bytes and it was stopped\n")
    assert "[stdout before the failure]\nspamspam" in loud.error and len(loud.error) < 2048 + 200  # kept output capped
    assert not (slow.service_error or greedy.service_error or loud.service_error)


def test_sandbox_containment_still_applies():
    result = run("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)")
    assert not result.ok and not result.service_error  # the program's failure, reported to the model


def test_max_output_chars_clips_what_the_model_reads():
    result = run("print('a' * 50)", max_output_chars=20)
    assert result.ok and result.output == "a" * 20 + "\n... [30 more characters]"
    assert clip_text("abc", 3) == "abc"


def test_empty_program_is_refused_without_running():
    result = run("  \n ")
    assert not result.ok and result.error == "the program is empty" and result.data is None


@pytest.mark.parametrize(
    "executable, message",
    [
        ("/nonexistent/python3", "the sandbox could not run the program: FileNotFoundError"),
        ("/bin/false", "the sandbox failed: the sandbox runner failed before reporting"),
    ],
)
def test_a_broken_sandbox_is_a_service_error(executable, message):
    result = run("print(1)", limits=SandboxLimits(python_executable=executable))
    assert not result.ok and result.service_error and result.error.startswith(message)


def test_constructor_validates_max_output_chars():
    with pytest.raises(ValueError, match="max_output_chars must be a positive integer, got 0"):
        PythonToolGroup(max_output_chars=0)
