"""The real-service harness tests and benchmarks share: a private redis-server and dockerd, a replicated store with
its Sentinels and the faults it fails over on, one failover round under deliveries, worker processes supervised as
systemd would and a watch on their containers, the hostile-input generators, a store relay that stalls, the
reference's modules from its diff, example jobs. The product never imports it.
"""
