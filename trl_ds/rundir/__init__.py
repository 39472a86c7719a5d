"""Build: the contents of the run dir (DeepSpeed JSON, trainer args, interop files) and its layout."""
