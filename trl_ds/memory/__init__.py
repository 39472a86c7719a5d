"""Memory: the estimate before launch and the measurement on every rank."""
