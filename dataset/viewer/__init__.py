"""The pair viewer and the §4.3 human false-negative audit (``python -m dataset.viewer``): a local
web page on a run directory's pairs or a WebPRMBench file's, served by ``dataset.viewer.app``;
the command line is ``dataset.viewer.cli`` (its parser is exported here, where the CLI walk and
``python -m`` look for the package's command)."""

from dataset.viewer.cli import build_parser, main

__all__ = ["build_parser", "main"]
