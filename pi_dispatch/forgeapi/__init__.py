"""Calls to the forges' APIs that the receiver and the worker share: one HTTP client, each forge's tokens."""
