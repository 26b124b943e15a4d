"""skyrl_train: the reinforcement-learning trainer (config, algorithms, workers, engines) built on skyrl_gym."""

__version__ = "0.1.0+repo"
