"""The audit: placement findings, live drift, the store's own findings, the cron audit and the rollout's health gate.
Pure over already-loaded inputs.
"""
