"""CA and serving certificates for migfit's HTTPS servers: issue, store, rotate, reload."""
