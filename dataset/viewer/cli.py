"""The pair viewer: a local web page on a run's pairs (or a WebPRMBench file's), and the §4.3
human false-negative audit.

    python -m dataset.viewer --run RUN [--port 8765]
    python -m dataset.viewer --bench FILE.parquet
    python -m dataset.viewer --run RUN --audit NAME [--sample 100 --seed 42]
    python -m dataset.viewer summary --run RUN [--json]

The server binds 127.0.0.1 and answers only requests addressed to a loopback name unless
``--host`` names another interface. It writes nothing unless an audit is running, and then only
``RUN/audit/human-NAME.parquet`` (``FILE.audit/human-NAME.parquet`` next to a WebPRMBench file).
``summary`` prints the false-negative rate with Wilson intervals, overall and per rule and axis,
the agreement with the demonstration label and the teacher, and Cohen's kappa of each two
annotators on the pairs both audited.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from cli.config import CLIParser, Configurable, make_parser
from cli.errors import error_exit
from data.rundir import RunDirError


@dataclass
class SourceOptions(Configurable):
    ARG_GROUP = "pairs"
    run: str | None = field(default=None, metadata={"help": "run directory whose verified pairs to show"})
    bench: str | None = field(default=None, metadata={"help": "a WebPRMBench-format Parquet file to show instead "
                                                             "of a run"})


@dataclass
class ServeOptions(Configurable):
    ARG_GROUP = "server and audit"
    port: int = field(default=8765, metadata={"min": 0, "max": 65535, "help": "port to listen on (0: any free one)"})
    host: str = field(default="127.0.0.1", metadata={"help": "interface to bind; requests naming another host "
                                                              "than this or a loopback name are refused"})
    audit: str | None = field(default=None, metadata={"help": "start the blind audit as this annotator (answers "
                                                               "go to audit/human-NAME.parquet)"})
    sample: int = field(default=100, metadata={"min": 1, "help": "pairs in the audit's sample"})
    seed: int = field(default=42, metadata={"min": 0, "help": "seeds the audit's sample and the order shown"})
    request_timeout: float = field(default=10.0, metadata={"min": 0.1, "help": "seconds a request (headers and "
                                                                               "body) may take to arrive; a slower "
                                                                               "connection is closed"})


@dataclass
class SummaryOptions(Configurable):
    ARG_GROUP = "summary"
    json: bool = field(default=False, metadata={"help": "print the figures as one JSON object"})


def build_parser() -> CLIParser:
    ap = make_parser("python -m dataset.viewer", __doc__)
    SourceOptions.add_args(ap)
    ServeOptions.add_args(ap)
    sub = ap.add_subparsers(dest="command", metavar="{summary}")
    summary = sub.add_parser("summary", help="the audit's figures (false negatives, agreement, kappa)",
                             description="The §4.3 audit's figures from every audit/human-*.parquet of a run.")
    SourceOptions.add_args(summary)
    SummaryOptions.add_args(summary)
    return ap


def open_source(ap: CLIParser, opts: SourceOptions):
    from dataset.tables import require_run_dir
    from dataset.viewer.source import PairSource

    if (opts.run is None) == (opts.bench is None):
        ap.error("give --run RUN or --bench FILE (one of them)")
    if opts.run is not None:
        require_run_dir(ap, opts.run)
    elif not Path(opts.bench).is_file():
        ap.error(f"--bench {opts.bench}: no such file")
    try:
        return PairSource.open(opts.run, opts.bench)
    except FileNotFoundError as e:
        ap.error(str(e))


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    opts = SourceOptions.from_args(args)
    try:
        if args.command == "summary":
            from dataset.viewer.audit import format_summary, summarize

            source = open_source(ap, opts)
            summary = summarize(source.audit_dir, source.replay_outcomes())
            as_json = SummaryOptions.from_args(args).json
            print(json.dumps(summary, sort_keys=True) if as_json else format_summary(summary))
            return 0
        from dataset.viewer.app import make_app
        from dataset.viewer.server import bind, serve

        serve_opts = ServeOptions.from_args(args)
        bind(serve_opts.host, serve_opts.port).close()      # a taken port is said before the pairs are read
        app = make_app(open_source(ap, opts), serve_opts.audit, serve_opts.sample, serve_opts.seed,
                       host=serve_opts.host)
        serve(app, serve_opts.host, serve_opts.port, serve_opts.request_timeout)
    except (RunDirError, ValueError, OSError) as e:
        return error_exit(e)
    return 0

