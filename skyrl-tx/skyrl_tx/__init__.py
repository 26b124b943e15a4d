"""skyrl_tx: a Tinker-compatible REST service for post-training on skyrl_train's workers."""

__version__ = "0.1.0+repo"
