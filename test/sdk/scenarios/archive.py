"""The checkpoint archive (shared/wire/archive/archive.ts) as the SDK's CLI and a safetensors reader see it.

The test file writes the archive to CHECKPOINT_ARCHIVE and asserts on what this script reports. The
download, extraction and push-hf code is the SDK's own (tinker.cli.commands.checkpoint), called
directly: the archive is served as a file:// URL (urllib opens it as it would the presigned URL) and
push-hf's Hub calls go to a recording stand-in, so nothing leaves the machine.
"""

import json
import os
import sys
import tarfile
import tempfile
import types
from pathlib import Path

from checks import Checks

from tinker.cli.commands import checkpoint as cli_checkpoint
from tinker.cli.exceptions import TinkerCliError

checks = Checks()

ARCHIVE = Path(os.environ["CHECKPOINT_ARCHIVE"])
TINKER_PATH = os.environ["CHECKPOINT_TINKER_PATH"]
WORK = Path(tempfile.mkdtemp(prefix="archive-scenario-"))


def download_and_extract(url: str, name: str) -> Path:
    """What `tinker checkpoint download` does with the URL: fetch to a .tar, then the safe extraction."""
    archive_path = WORK / f"{name}.tar"
    cli_checkpoint._download_checkpoint_archive(url, archive_path=archive_path, show_progress=False, format="json")
    target = WORK / name
    target.mkdir()
    cli_checkpoint._safe_extract_tar(archive_path, target, show_progress=False, format="json")
    return target


@checks.check
def tarfile_reads_the_members():
    """Python's tarfile (auto-detecting the compression, as the CLI opens it) and its strictest filter."""
    with tarfile.open(ARCHIVE, "r") as tar:
        members = tar.getmembers()
        for member in members:
            # The "data" filter (Python 3.14's default) refuses links, devices and unsafe paths or modes.
            tarfile.data_filter(member, str(WORK))
    return {
        "members": [
            {
                "name": member.name,
                "is_file": member.isfile(),
                "size": member.size,
                "mode": member.mode,
                "mtime": member.mtime,
                "uid": member.uid,
                "gid": member.gid,
            }
            for member in members
        ],
    }


@checks.check
def cli_download_extracts_the_adapter():
    folder = download_and_extract(ARCHIVE.as_uri(), "download")
    return {"files": sorted([path.name, path.stat().st_size] for path in folder.iterdir())}


@checks.check
def safetensors_loads_the_weights():
    """The `safetensors` package reads the file as numpy arrays; every value is reported exactly."""
    from safetensors import safe_open
    from safetensors.numpy import load_file

    folder = download_and_extract(ARCHIVE.as_uri(), "weights")
    path = folder / "adapter_model.safetensors"
    tensors = load_file(path)
    with safe_open(path, framework="numpy") as handle:
        metadata = handle.metadata()
        keys = list(handle.keys())
    return {
        "metadata": metadata,
        "keys": keys,
        "tensors": {
            name: {"dtype": str(array.dtype), "shape": list(array.shape), "values": array.ravel().tolist()}
            for name, array in tensors.items()
        },
    }


@checks.check
def adapter_config_parses():
    folder = download_and_extract(ARCHIVE.as_uri(), "config")
    return json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))


class RecordingHub:
    """Stands in for huggingface_hub's HfApi: records what push-hf would upload."""

    uploads: list = []

    def whoami(self):
        return {"name": "archive-scenario"}

    def create_repo(self, repo_id, private, exist_ok):
        return repo_id

    def upload_folder(self, *, folder_path, repo_id, revision, ignore_patterns=None, **_):
        folder = Path(folder_path)
        RecordingHub.uploads.append(
            {
                "repo_id": repo_id,
                "revision": revision,
                "files": sorted(path.name for path in folder.iterdir()),
                "ignore_patterns": ignore_patterns,
                "adapter_config": json.loads((folder / "adapter_config.json").read_text(encoding="utf-8")),
                "readme_has_tinker_path": f"tinker_path: {TINKER_PATH}" in (folder / "README.md").read_text(),
            }
        )


def no_readme_on_the_hub(**_):
    raise FileNotFoundError("no README.md on the stand-in Hub")


sys.modules["huggingface_hub"] = types.SimpleNamespace(HfApi=RecordingHub, hf_hub_download=no_readme_on_the_hub)


class ArchiveOnlyClient:
    """The RestClient methods push-hf calls: the archive URL, and weights_info (which it may fail)."""

    def __init__(self, url: str):
        self.url = url

    def get_checkpoint_archive_url_from_tinker_path(self, tinker_path):
        assert tinker_path == TINKER_PATH, tinker_path
        return types.SimpleNamespace(result=lambda: types.SimpleNamespace(url=self.url))

    def get_weights_info_by_tinker_path(self, tinker_path):
        raise ConnectionError("no server in this scenario; push-hf tolerates it")


def push_hf(url: str) -> str:
    return cli_checkpoint._export_checkpoint_to_hub(
        ArchiveOnlyClient(url),
        TINKER_PATH,
        None,
        private=True,
        revision=None,
        commit_message=None,
        create_pr=False,
        exist_ok=True,
        allow_patterns=None,
        ignore_patterns=None,
        add_model_card=True,
    )


@checks.check
def push_hf_accepts_the_archive():
    RecordingHub.uploads.clear()
    repo_id = push_hf(ARCHIVE.as_uri())
    return {"repo_id": repo_id, "uploads": RecordingHub.uploads}


@checks.check
def push_hf_refuses_it_without_checkpoint_complete():
    """The control: the same adapter without the marker fails push-hf's own validation."""
    source = download_and_extract(ARCHIVE.as_uri(), "unmarked-source")
    unmarked = WORK / "unmarked.tar"
    with tarfile.open(unmarked, "w") as tar:
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            tar.add(source / name, arcname=name)
    try:
        push_hf(unmarked.as_uri())
    except TinkerCliError as error:
        return {"error": str(error)}
    return {"error": None}


checks.run()
