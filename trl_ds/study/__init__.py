"""Studies over finished runs: sweep rows, tables, plots, equivalence of batch shapes, calibration."""
