"""Test-only kernels with one defect each, for fault injection (bench/fault_study.py, tests)."""
