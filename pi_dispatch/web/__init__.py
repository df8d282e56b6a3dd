"""The web console: pages over the store, served by `pi-dispatch console` (`app.py`)."""
