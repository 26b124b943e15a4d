"""Recipes: complete procedures built from the library's parts, kept out of the core rooms they use.

| module | job |
|---|---|
| warm_start | supervised warm start of the tiny model on a synthetic task, stopped once held-out accuracy is in a band |
| embedded | the embedded default model: warm-started once per settings and cached under `$SKYRL_CACHE/embedded/<key>` |
"""
