"""One host's worker, in rooms by stage: `take` (queue consumers, slot-gated pickup), `gates` (secrets, waits,
placement, limits, dollars, egress), `prepare` (job folders, container specs), `run` (containers, output, fencing),
`after` (records, one-shots, egress refusals) and `host` (upkeep, boot, cancel and drain, cron, status, the egress
proxy); its lifecycle, assembly and attempts wire them, and its metrics are below them all.
"""
