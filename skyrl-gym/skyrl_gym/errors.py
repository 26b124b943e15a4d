"""Exception types raised by skyrl_gym; each message names the thing that is wrong and what was expected."""


class SkyRLGymError(Exception):
    """Base class of every error skyrl_gym raises on purpose."""


class RegistrationError(SkyRLGymError):
    """An environment id was registered twice, or an entry point could not be resolved."""


class UnknownEnvError(SkyRLGymError, KeyError):
    """`make` or `spec` was asked for an id that is not registered."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class EnvStateError(SkyRLGymError):
    """An environment was used out of order: `step` before `init`, or after the episode ended or was closed."""


class EnvOutputError(SkyRLGymError):
    """An environment's `step` returned something that is not a valid step output."""


class ToolError(SkyRLGymError):
    """A tool was declared wrongly (bad signature, duplicate name) or called by an unknown name."""
