"""The cost model: a config's ratio to cuBLAS on a problem, predicted before anything is measured."""
