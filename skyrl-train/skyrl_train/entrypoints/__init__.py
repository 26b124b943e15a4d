"""Command-line entrypoints of skyrl_train (each runnable with `python -m skyrl_train.entrypoints.<name>`), and
`example_run`: what the CPU example scripts share around their own config (they run `BasePPOExp` from here)."""
