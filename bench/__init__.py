"""The benchmark suite (`make bench`): see bench/run.py and docs/BENCHMARKS.md."""
