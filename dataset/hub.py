"""Push a run's dataset to the Hugging Face Hub: the card (``RUN/README.md``, whose header lists the
configs), every file its configs name, and the report, in one commit.

    HF_HUB_OFFLINE=0 python -m dataset.export --run RUN --format trl --format trl-preference --push-to-hub USER/NAME

The token is ``huggingface_hub``'s own (``HF_TOKEN`` or ``hf auth login``), never a flag. The
Makefile sets ``HF_HUB_OFFLINE=1`` (nothing reaches a hub at run time); a push is the one step that
must, so it says so in one line when offline. ``load_dataset("USER/NAME", "trl")`` then loads what
``load_dataset(RUN, "trl")`` loads locally.
"""

from __future__ import annotations

from pathlib import Path


def hub_files(run_dir: str | Path) -> list[str]:
    """The run's files a push uploads, relative to it: the card, the files of every config its
    header lists, and the report (the card links it)."""
    from dataset.card import card_data

    root = Path(run_dir)
    data = [f["path"] for c in card_data(root).configs or [] for f in c["data_files"]]
    report = sorted(str(p.relative_to(root)) for p in (root / "report").glob("*") if p.is_file())
    return ["README.md", *dict.fromkeys(data), *report]


def push_to_hub(run_dir: str | Path, repo_id: str, private: bool = False, api=None) -> str:
    """Create the dataset repository ``repo_id`` (kept when it exists) and commit ``hub_files`` to
    it; returns the commit's URL. ``api``: a ``huggingface_hub.HfApi`` (default: a new one)."""
    from huggingface_hub import CommitOperationAdd, HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError

    if constants.HF_HUB_OFFLINE:
        raise ValueError("--push-to-hub needs the network, and HF_HUB_OFFLINE is set (the Makefile sets it): "
                         "run with HF_HUB_OFFLINE=0")
    root = Path(run_dir)
    if not (root / "README.md").exists():
        raise FileNotFoundError(f"{root / 'README.md'} not found: --push-to-hub pushes the card, drop --no-card")
    api = api or HfApi()
    ops = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(root / rel)) for rel in hub_files(root)]
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        info = api.create_commit(repo_id, ops, repo_type="dataset", commit_message=f"surfprm dataset {root.name}")
    except HfHubHTTPError as e:       # no token, no write access, a bad name: the Hub's own first line
        raise ValueError(f"--push-to-hub {repo_id}: {str(e).strip().splitlines()[0]}") from None
    return info.commit_url
