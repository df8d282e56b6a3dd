"""Running the container: Docker, its output as it runs, its exit, and the lock fence around it."""
