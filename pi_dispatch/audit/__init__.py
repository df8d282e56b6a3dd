"""The audit: placement findings, live drift, the cron audit and the rollout's health gate. Pure over already-loaded
inputs.
"""
