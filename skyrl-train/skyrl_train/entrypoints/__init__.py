"""Command-line entrypoints of skyrl_train (each runnable with `python -m skyrl_train.entrypoints.<name>`)."""
