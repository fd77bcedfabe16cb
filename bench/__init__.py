"""`make bench`: catch-up, steady-state and restart benchmarks against MirrorMaker 2 and the Kafka
perf tools, on the local sandbox (see BENCHMARKS.md for results and method)."""
