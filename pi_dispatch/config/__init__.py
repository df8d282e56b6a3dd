"""Configuration: env files, the one declaration of each setting and its sources, the schemas, the worker's and the
receiver's settings, the inventory's host variables.
"""
