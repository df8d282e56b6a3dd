"""The host's own upkeep: each beat's steps, boot checks, cancel and drain, cron, status and the egress proxy."""
