"""The try-out: the example fleet for real on this machine, its embedded store and example job image."""
