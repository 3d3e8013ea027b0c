"""Built-in cluster profiles (TOML), shipped as package data."""
