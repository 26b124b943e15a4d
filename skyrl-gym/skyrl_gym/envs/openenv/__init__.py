"""`OpenEnvEnv`: any OpenEnv environment server as a skyrl-gym env."""
