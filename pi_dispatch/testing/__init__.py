"""The real-service harness tests and benchmarks share: a private redis-server and dockerd, a replicated store with
its Sentinels and the faults it fails over on, a store relay that stalls, the reference's modules from its diff,
example jobs. The product never imports it.
"""
