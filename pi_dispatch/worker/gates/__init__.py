"""The gates before spend: secrets, wait conditions, placement, limits, dollars and the egress way out."""
