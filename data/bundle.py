"""Rebuild the bundled sample (``data/bundled/``) from the shared real traces.

    python -m data.bundle --shared ../shared/data --out data/bundled

Picks a handful of successful AgentLab runs (two of one task, so cross-run identity can be
seen), converts them to the canonical Parquet format (no pickles ship with the project), and
copies the WebPRM Collection sample records. The result must stay under 5 MB.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cli.config import Configurable, make_parser
from data.readers.agentlab import read_experiment
from data.rundir import atomic_write_parquet
from data.schema import ROW_GROUP_SIZE, StepRecord, for_storage, steps_to_table

# Run-name fragments of the successful runs that make up the sample.
RUNS = (
    "order-ipad-pro_14", "order-ipad-pro_11", "order-ipad-pro_2", "order-standard-laptop_33",
    "order-loaner-laptop_4", "order-loaner-laptop_24", "order-apple-watch_3", "order-ipad-mini_15",
    "order-development-laptop-p-c_8", "knowledge-base-search_5", "all-menu_4",
)
MAX_BYTES = 5 * 1024 * 1024


def build(shared: Path, out: Path) -> Path:
    records: list[StepRecord] = []
    for frag in RUNS:
        matches = sorted(d for d in (shared / "agentlab_workarena").iterdir() if d.name.endswith(frag))
        for exp_dir in matches:
            recs = [r for r in read_experiment(exp_dir) if isinstance(r, StepRecord)]
            if recs and recs[0].success:
                # Paths inside the shared folder mean nothing on another machine.
                for r in recs:
                    r.source_path = f"agentlab_workarena/{exp_dir.name}/{Path(r.source_path).name}"
                    r.meta = r.meta.replace(str(exp_dir), f"agentlab_workarena/{exp_dir.name}")
                records += recs
                break
    out.mkdir(parents=True, exist_ok=True)
    target = out / "agentlab_workarena.parquet"
    atomic_write_parquet(target, for_storage(steps_to_table(records)), ROW_GROUP_SIZE)
    webprm = out / "webprm"
    webprm.mkdir(exist_ok=True)
    for f in sorted((shared / "webprm_collection_samples").glob("*.json")):
        shutil.copyfile(f, webprm / f.name)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    if size > MAX_BYTES:
        raise SystemExit(f"bundled sample is {size / 1e6:.1f} MB, over the 5 MB budget")
    print(f"{len(records)} observations from {len({r.traj_id for r in records})} runs -> {target} "
          f"({size / 1e6:.2f} MB with the WebPRM records)")
    return target


@dataclass
class BundleCommand(Configurable):
    """The flags of ``python -m data.bundle``."""

    ARG_GROUP = "bundle"

    shared: str = field(default="../shared/data", metadata={
        "help": "folder of the shared traces (agentlab_workarena/, webprm_collection_samples/)"})
    out: str = field(default="data/bundled", metadata={"help": "folder of the bundled sample to write"})


def build_parser():
    ap = make_parser("python -m data.bundle", __doc__)
    BundleCommand.add_args(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = BundleCommand.from_args(build_parser().parse_args(argv))
    build(Path(args.shared), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
