"""What an operator sees: the live fleet view, tables and terminal-safe text."""
