"""Checks before launch: every cross-group rule, all problems in one ConfigError, nothing spawned."""
