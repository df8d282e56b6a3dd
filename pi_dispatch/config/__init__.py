"""Configuration: env files, the one declaration of each setting and its sources, the schemas, the worker's and the
receiver's settings, the inventory's host variables, and the handover of checked settings to a worker that never
loads the checking libraries.
"""
