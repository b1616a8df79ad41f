"""The bottom layer: errors, metric objects and the one bounded process-memory cache; no Django app, no models."""
