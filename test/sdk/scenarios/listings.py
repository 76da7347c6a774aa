"""The listings (C1) and their isolation (C6) as the SDK's RestClient and CLI read them, with two tenants.

Other scenarios train as the same tenants at the same time, so the checks look at this script's own runs,
checkpoints and session inside the tenant's lists (their order, their fields), never at exact totals.
"""

import functools
import json
import os
import subprocess
import sys

import tinker

from checks import BASE_MODEL, Checks, other_tenant, service

checks = Checks()

METADATA = {"purpose": "listings", "step": "3"}


def rest(other: bool = False):
    return (other_tenant() if other else service()).create_rest_client()


@functools.cache
def made():
    """Two runs of this script's session; the first with a training, a sampler and a second training
    checkpoint (saved in that order), and a sampling session on the sampler checkpoint."""
    first = service().create_lora_training_client(base_model=BASE_MODEL, rank=4, seed=7, user_metadata=METADATA)
    paths = [
        first.save_state("list-w1").result().path,
        first.save_weights_for_sampler("list-s1").result().path,
        first.save_state("list-w2").result().path,
    ]
    sampler = service().create_sampling_client(model_path=paths[1])
    second = service().create_lora_training_client(base_model=BASE_MODEL, rank=2, seed=8)
    # A submit to the second run, so it has a model row with a commit behind it too.
    second.save_state("list-second").result()
    return {
        "first": first.model_id,
        "second": second.model_id,
        "paths": paths,
        "second_path": f"tinker://{second.model_id}/weights/list-second",
        "sampler": sampler,
        "session": service().holder.get_session_id(),
    }


def run_dict(run) -> dict:
    return {
        "id": run.training_run_id,
        "owner": run.model_owner,
        "base_model": run.base_model,
        "is_lora": run.is_lora,
        "lora_rank": run.lora_rank,
        "user_metadata": run.user_metadata,
        "last_request_time_aware": run.last_request_time.tzinfo is not None,
        "last_checkpoint": run.last_checkpoint.tinker_path if run.last_checkpoint else None,
        "last_sampler_checkpoint": run.last_sampler_checkpoint.tinker_path if run.last_sampler_checkpoint else None,
    }


def all_pages(fetch, items_of, batch: int) -> tuple[list, list[int]]:
    """The CLI's loop (tinker/cli/commands/checkpoint.py list): the total from the first cursor, then
    pages of `batch` until that many are read or a page comes back short."""
    first = fetch(batch, 0)
    items = list(items_of(first))
    total = first.cursor.total_count if first.cursor else len(items)
    totals = [total]
    while len(items) < total:
        page = fetch(batch, len(items))
        totals.append(page.cursor.total_count)
        items.extend(items_of(page))
        if len(items_of(page)) < batch:
            break
    return items, totals


def stable_paging(fetch, items_of, key, batch: int) -> dict:
    """Pages of `batch` (the CLI's loop) against one page of 1000 read before and after: other scenarios
    save and delete as the same tenant meanwhile, so the comparison is made on a try where the whole list
    did not change (up to 5 tries)."""
    for attempt in range(1, 6):
        before = [key(item) for item in items_of(fetch(1000, 0))]
        paged, totals = all_pages(fetch, items_of, batch)
        after = [key(item) for item in items_of(fetch(1000, 0))]
        if before == after:
            return {"paged_equals_whole": [key(item) for item in paged] == before, "totals_equal_length": set(totals) == {len(before)}, "pages": len(totals), "tries": attempt, "items": paged}
    raise AssertionError("the list changed under every one of 5 tries")


@checks.check
def list_training_runs_pages_through_the_owners_runs():
    ids = made()
    paging = stable_paging(
        lambda limit, offset: rest().list_training_runs(limit=limit, offset=offset).result(),
        lambda page: page.training_runs,
        lambda run: run.training_run_id,
        batch=2,
    )
    runs = paging.pop("items")
    mine = [run_dict(run) for run in runs if run.training_run_id in (ids["first"], ids["second"])]
    return {
        **paging,
        "owners": sorted({run.model_owner for run in runs}),
        "mine": mine,
        "expected": [ids["second"], ids["first"]],
        "paths": ids["paths"],
    }


@checks.check
def get_training_run_answers_the_owner_and_404s_the_other_tenant():
    ids = made()
    run = rest().get_training_run(ids["first"]).result()
    try:
        rest(other=True).get_training_run(ids["first"]).result()
        refused = None
    except tinker.NotFoundError as error:
        refused = {"raised": type(error).__name__, "message": str(error)[:200]}
    try:
        rest(other=True).get_training_run("model-nobody").result()
        unknown = None
    except tinker.NotFoundError as error:
        unknown = {"raised": type(error).__name__, "message": str(error)[:200]}
    return {"run": run_dict(run), "refused": refused, "unknown": unknown, "run_id": ids["first"]}


@checks.check
def list_checkpoints_of_a_run_newest_first_without_a_cursor():
    ids = made()
    listed = rest().list_checkpoints(ids["first"]).result()
    return {
        "cursor": listed.cursor,
        "checkpoints": [
            {
                "checkpoint_id": c.checkpoint_id,
                "checkpoint_type": c.checkpoint_type,
                "tinker_path": c.tinker_path,
                "time_aware": c.time.tzinfo is not None,
                "public": c.public,
                "expires_at": c.expires_at,
            }
            for c in listed.checkpoints
        ],
        "times_newest_first": [c.time for c in listed.checkpoints] == sorted((c.time for c in listed.checkpoints), reverse=True),
        "paths": ids["paths"],
    }


@checks.check
def list_user_checkpoints_pages_as_the_cli_does():
    ids = made()
    paging = stable_paging(
        lambda limit, offset: rest().list_user_checkpoints(limit=limit, offset=offset).result(),
        lambda page: page.checkpoints,
        lambda checkpoint: checkpoint.tinker_path,
        batch=2,
    )
    checkpoints = paging.pop("items")
    ours = set(ids["paths"]) | {ids["second_path"]}
    others = [c.tinker_path for c in rest(other=True).list_user_checkpoints(limit=1000).result().checkpoints]
    times = [c.time for c in checkpoints]
    return {
        **paging,
        "mine_in_order": [c.tinker_path for c in checkpoints if c.tinker_path in ours],
        "expected": [ids["second_path"], *reversed(ids["paths"])],
        "newest_first": times == sorted(times, reverse=True),
        "other_sees_ours": sorted(ours & set(others)),
    }


@checks.check
def list_sessions_and_get_session():
    ids = made()
    sessions = rest().list_sessions(limit=1000).result().sessions
    session = rest().get_session(ids["session"]).result()
    try:
        rest(other=True).get_session(ids["session"]).result()
        refused = None
    except tinker.NotFoundError as error:
        refused = type(error).__name__
    return {
        "listed": ids["session"] in sessions,
        "other_lists_it": ids["session"] in rest(other=True).list_sessions(limit=1000).result().sessions,
        "training_run_ids": session.training_run_ids,
        "sampler_ids": session.sampler_ids,
        "expected_runs": [ids["first"], ids["second"]],
        "expected_sampler": ids["sampler"]._sampling_session_id,
        "refused": refused,
    }


def cli(*args: str, other: bool = False) -> subprocess.CompletedProcess:
    """The SDK's CLI as a user runs it (`python -m tinker.cli`), as the owner or the other tenant."""
    env = dict(os.environ)
    if other:
        env["TINKER_API_KEY"] = os.environ["TINKER_OTHER_API_KEY"]
    return subprocess.run(
        [sys.executable, "-m", "tinker.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def cli_json(*args: str, other: bool = False):
    done = cli("--format", "json", *args, other=other)
    assert done.returncode == 0, f"tinker {' '.join(args)} exited {done.returncode}: {done.stderr[-800:]}"
    return json.loads(done.stdout)


@checks.check
def cli_run_list_and_checkpoint_list():
    ids = made()
    runs = cli_json("run", "list", "--limit", "0")["runs"]
    other_runs = cli_json("run", "list", "--limit", "0", other=True)["runs"]
    of_run = cli_json("checkpoint", "list", "--run-id", ids["first"])["checkpoints"]
    everything = cli_json("checkpoint", "list", "--limit", "0")["checkpoints"]
    tables = {
        name: cli(*args)
        for name, args in {
            "run_list": ("run", "list"),
            "checkpoint_list": ("checkpoint", "list"),
            "checkpoint_list_run": ("checkpoint", "list", "--run-id", ids["first"]),
        }.items()
    }
    return {
        "run_ids": [run["training_run_id"] for run in runs],
        "other_run_ids": [run["training_run_id"] for run in other_runs],
        "of_run": [c["tinker_path"] for c in of_run],
        "all_paths": [c["tinker_path"] for c in everything],
        "tables": {name: {"code": done.returncode, "stderr": done.stderr[-400:]} for name, done in tables.items()},
        "ids": {"first": ids["first"], "second": ids["second"], "paths": ids["paths"], "second_path": ids["second_path"]},
    }


if __name__ == "__main__":
    checks.run()
