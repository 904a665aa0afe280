"""Command-line commands of the migfit core (one module per command)."""
