"""The shop's own settings declared by domain; config/settings/registry.py gathers them in
the reference page's order."""
