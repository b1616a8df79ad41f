"""The multi-host drills: network namespaces as hosts (python -m devtools.drill)."""
