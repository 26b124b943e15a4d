"""Small shared utilities (checksums, timers, logging helpers)."""
