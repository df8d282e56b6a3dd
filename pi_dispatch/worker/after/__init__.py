"""After the run: the record on disk, one-shot rules spent, egress refusals attached."""
