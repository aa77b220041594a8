"""data: schemas, readers and writers of the files in a run directory."""
