"""Taking a job: BullMQ's consumers and slot-gated pickup, stealing included."""
