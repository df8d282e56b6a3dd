"""The forges: one spec per forge (its headers, delivery id, authentication, projection, gate and authority lookup),
with the forge API client, authority and identity.
"""
