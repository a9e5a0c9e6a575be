"""tirtune's benchmarks and the GPU host's step runner (bench/README.md indexes them).

A package, so scripts import each other and tirtune without editing `sys.path`: run them from the
repository root as `python -m bench.<script>`.
"""
