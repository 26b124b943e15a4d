"""Exception and warning types of the config system; each message names the full key path and what was expected."""


class ConfigError(ValueError):
    """Base class of every error the config system raises on purpose."""


class UnknownConfigKeyError(ConfigError):
    """A key (from a dict, a YAML file or an override) names no field of the config; the message suggests near ones."""


class ConfigTypeError(ConfigError, TypeError):
    """A value does not have the type its field declares; the message gives the path, the type and the value."""


class OverrideSyntaxError(ConfigError):
    """A command-line override is not of the form `a.b.c=value` (or `+a.b=value`, `++a.b=value`, `~a.b`)."""


class ConfigValidationError(ConfigError):
    """One or more cross-field checks failed; `problems` lists each one with what to change."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {problem}" for problem in self.problems)
        super().__init__(f"invalid config ({len(self.problems)} problem(s)):\n{lines}")


class ConfigWarning(UserWarning):
    """A config that runs but probably does not do what was meant (e.g. a critic that the estimator ignores)."""


class UnsupportedFeatureError(ConfigError):
    """A key or value (often NovaSky-AI/SkyRL's) asks for a feature this project does not have; the message names it."""
