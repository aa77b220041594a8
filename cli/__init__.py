"""The command line every stage shares, below all of them: typed configuration as flags and YAML
(``cli.config``), progress bars on stderr (``cli.progress``) and the one-line error a bad input
ends with (``cli.errors``). It imports no other package of the project."""
