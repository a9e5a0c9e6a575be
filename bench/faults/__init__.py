"""Test-only kernels with one defect each, for fault injection (bench/fault_study.py, tests)."""

# The folder the fault variants' generated modules are written to (every process that builds one
# must see the same): default `tirtune-faults` in the temp dir; the tests give each run its own.
FAULTS_DIR_ENV = "TIRTUNE_FAULTS_DIR"
