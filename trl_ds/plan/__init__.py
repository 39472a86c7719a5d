"""Plan: parameter counts, the memory estimate, the step-time model, the grid of what fits, auto-fit."""
