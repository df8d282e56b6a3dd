"""The triggers file in the reference's format: its parser, its terms, the run half, cron schedules and live reload."""
