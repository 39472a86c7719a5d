"""Config: the typed schema, the derived values every layer reads, batch arithmetic. Imports nothing of trl_ds but errors."""
