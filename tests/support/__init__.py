"""Helpers the tests share: the CLI in-process or as a child, a terminal, real workers, the receiver, a fake forge."""
