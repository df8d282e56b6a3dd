"""Preparing a job: its folder and its container's spec."""
