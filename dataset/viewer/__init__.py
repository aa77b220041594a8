"""The pair viewer and the §4.3 human false-negative audit (``python -m dataset.viewer``): a local
web page on a run directory's pairs or a WebPRMBench file's, served by ``dataset.viewer.app``."""
