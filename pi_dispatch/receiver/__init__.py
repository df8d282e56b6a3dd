"""The webhook front door: the server, its boot, authentication, routes, rules and metrics; one module per forge in
forges/.
"""
