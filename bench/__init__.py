"""tirtune's benchmarks and GPU-session tools (bench/README.md indexes them).

A package, so scripts import each other and tirtune without editing `sys.path`: run them from the
repository root as `python -m bench.<script>`.
"""
