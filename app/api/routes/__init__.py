"""Route modules, one per resource (runs, stream, sessions, health)."""
