"""The checkpoint lifecycle (C2-C5) through the SDK's RestClient and its CLI, with two tenants:
the archive URL and its download with no credentials, TTLs at save and by set-ttl, publish and
unpublish across tenants, delete. The CLI runs as a user runs it (`python -m tinker.cli ...`), with
the owner's TINKER_API_KEY and TINKER_BASE_URL from the environment."""

import functools
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import tinker
from tinker import types

from checks import Checks, new_model, other_tenant, service

checks = Checks()
WORK = Path(tempfile.mkdtemp(prefix="lifecycle-scenario-"))
PROMPT = types.ModelInput.from_ints([72, 105])
PARAMS = types.SamplingParams(max_tokens=4, seed=1)


@functools.cache
def rest():
    return service().create_rest_client()


@functools.cache
def other_rest():
    return other_tenant().create_rest_client()


@functools.cache
def model():
    return new_model(rank=4, seed=7)


def refusal(call) -> dict:
    """How the SDK refused `call`, and how long it took (a retried status would take minutes)."""
    started = time.monotonic()
    try:
        call()
    except (tinker.APIStatusError, tinker.RequestFailedError) as error:
        return {
            "raised": type(error).__name__,
            "status": getattr(error, "status_code", None),
            "seconds": round(time.monotonic() - started, 1),
        }
    raise AssertionError("the SDK did not raise")


def timed(call) -> float:
    started = time.monotonic()
    call()
    return round(time.monotonic() - started, 1)


def cli(*args: str) -> dict:
    """`tinker <args>` as a subprocess; its exit code and output."""
    done = subprocess.run(
        [sys.executable, "-m", "tinker.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=WORK,
        env=os.environ,
    )
    return {"code": done.returncode, "out": (done.stdout + done.stderr)[-400:]}


def weights_info_status(client, path: str) -> int:
    try:
        client.create_rest_client().get_weights_info_by_tinker_path(path).result()
        return 200
    except tinker.APIStatusError as error:
        return error.status_code


@checks.check
def archive_url_downloads_with_no_credentials():
    path = model().save_state("life-archive").result().path
    response = rest().get_checkpoint_archive_url_from_tinker_path(path).result()
    # What `tinker checkpoint download` does with it: a plain urlopen, no Tinker headers.
    with urllib.request.urlopen(response.url, timeout=60) as answer:
        body = answer.read()
    with tarfile.open(fileobj=io.BytesIO(body), mode="r") as tar:
        names = tar.getnames()
    expires = response.expires if response.expires.tzinfo else response.expires.replace(tzinfo=timezone.utc)
    return {
        "names": names,
        "expires_in_seconds": round((expires - datetime.now(timezone.utc)).total_seconds()),
        "other_tenant": refusal(lambda: other_rest().get_checkpoint_archive_url_from_tinker_path(path).result()),
    }


@checks.check
def save_state_with_a_short_ttl_expires_end_to_end():
    training = model()
    path = training.save_state("life-short", ttl_seconds=2).result().path
    before = weights_info_status(service(), path)
    time.sleep(2.5)
    return {
        "before": before,
        "weights_info_after": weights_info_status(service(), path),
        "load_after": refusal(lambda: training.load_state(path).result()),
        "archive_after": refusal(lambda: rest().get_checkpoint_archive_url_from_tinker_path(path).result()),
    }


@checks.check
def set_checkpoint_ttl_sets_and_clears():
    path = model().save_state("life-ttl").result().path
    rest().set_checkpoint_ttl_from_tinker_path(path, 3600).result()
    rest().set_checkpoint_ttl_from_tinker_path(path, None).result()
    cleared = weights_info_status(service(), path)
    rest().set_checkpoint_ttl_from_tinker_path(path, 1).result()
    time.sleep(1.5)
    return {
        "after_clear": cleared,
        "after_expiry": weights_info_status(service(), path),
        "zero": refusal(lambda: rest().set_checkpoint_ttl_from_tinker_path(path, 0).result()),
        "other_tenant": refusal(
            lambda: other_rest().set_checkpoint_ttl_from_tinker_path(
                model().save_state("life-ttl-2").result().path, 60
            ).result()
        ),
    }


@checks.check
def publish_lets_the_other_tenant_sample_until_unpublished():
    path = model().save_weights_for_sampler("life-pub").result().path
    before = refusal(lambda: other_tenant().create_sampling_client(model_path=path))
    rest().publish_checkpoint_from_tinker_path(path).result()
    again = timed(lambda: rest().publish_checkpoint_from_tinker_path(path).result())
    sampler = other_tenant().create_sampling_client(model_path=path)
    sampled = sampler.sample(PROMPT, 1, PARAMS).result()
    rest().unpublish_checkpoint_from_tinker_path(path).result()
    unpublish_again = timed(lambda: rest().unpublish_checkpoint_from_tinker_path(path).result())
    return {
        "before": before,
        "publish_again_seconds": again,
        "sampled_tokens": len(sampled.sequences[0].tokens),
        "unpublish_again_seconds": unpublish_again,
        "after": refusal(lambda: other_tenant().create_sampling_client(model_path=path)),
        "other_cannot_publish": refusal(lambda: other_rest().publish_checkpoint_from_tinker_path(path).result()),
    }


@checks.check
def delete_checkpoint_makes_it_unknown():
    path = model().save_state("life-delete").result().path
    refused = refusal(lambda: other_rest().delete_checkpoint_from_tinker_path(path).result())
    still = weights_info_status(service(), path)
    rest().delete_checkpoint_from_tinker_path(path).result()
    return {
        "other_tenant": refused,
        "before": still,
        "after": weights_info_status(service(), path),
        "again": refusal(lambda: rest().delete_checkpoint_from_tinker_path(path).result()),
    }


@checks.check
def cli_download_set_ttl_publish_delete():
    path = model().save_state("life-cli").result().path
    sampler_path = model().save_weights_for_sampler("life-cli-s").result().path
    download = cli("checkpoint", "download", path, "--output", str(WORK))
    folder = WORK / path.replace("tinker://", "").replace("/", "_")
    files = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
    set_ttl = cli("checkpoint", "set-ttl", path, "--ttl", "3600")
    remove_ttl = cli("checkpoint", "set-ttl", path, "--remove")
    publish = cli("checkpoint", "publish", sampler_path)
    other_reads = weights_info_status(other_tenant(), sampler_path)
    unpublish = cli("checkpoint", "unpublish", sampler_path)
    other_after = weights_info_status(other_tenant(), sampler_path)
    delete = cli("checkpoint", "delete", path, "--yes")
    return {
        "download": download,
        "files": files,
        "set_ttl": set_ttl,
        "remove_ttl": remove_ttl,
        "publish": publish,
        "other_reads_published": other_reads,
        "unpublish": unpublish,
        "other_after_unpublish": other_after,
        "delete": delete,
        "after_delete": weights_info_status(service(), path),
    }


if __name__ == "__main__":
    checks.run()
