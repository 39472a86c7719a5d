"""Config: the typed schema, its one composition, the derived values every layer reads, batch arithmetic. Imports
nothing of trl_ds but errors (tests/unit/test_layers.py).
"""
