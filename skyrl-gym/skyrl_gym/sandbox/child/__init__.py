"""Code that runs inside the sandboxed interpreter (stdlib only): the runner script and the kernel and audit helpers
it loads by file path, so that the child never imports the `skyrl_gym` package."""
