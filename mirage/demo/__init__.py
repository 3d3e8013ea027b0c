"""``mirage demo``: the daemon on a replayed real trace against reactive submission."""
