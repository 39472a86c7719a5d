"""Worker: what each rank runs, reading only the run dir: train, trainers, data, models, measurement."""
