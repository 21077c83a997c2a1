"""Which object store a local run uses: the job with that store, before it is rendered
(the manifest that runs says where its data goes). What of a file:// store the pods may
write is file_store.py's."""

from __future__ import annotations

from ...runstore.location import default_store_uri
from ...spec.model import Storage, TrainingJob
from ...storage import StoreError, open_store


def store_for_local_run(job: TrainingJob, override: str | None) -> tuple[TrainingJob, str | None]:
    """The job with the store a local run uses, and a warning when it is not the spec's.

    --storage wins; a file:// store is used as it is; an s3:// store when it answers now;
    otherwise (or with no storage at all) a directory under $KCTL_TRAIN_HOME."""
    fallback = default_store_uri()
    spec = job.spec.storage
    note = None
    if override:
        # Another s3:// location keeps the spec's endpoint and credentials; anything else
        # is a store of its own.
        same_kind = spec is not None and override.startswith("s3://") == spec.uri.startswith(
            "s3://"
        )
        storage = Storage.model_validate(
            {**(spec.model_dump() if spec and same_kind else {}), "uri": override}
        )
    elif spec is None:
        storage = Storage(uri=fallback)
    elif spec.uri.startswith("file://"):
        storage = spec
    else:
        try:
            open_store(spec.uri, endpoint=spec.endpoint, region=spec.region).probe()
            storage = spec
        except StoreError as exc:
            note = f"storage {spec.uri} is not reachable ({exc}); storing to {fallback} instead"
            storage = Storage(uri=fallback)
    updated = job.model_copy(
        update={"spec": job.spec.model_copy(update={"storage": storage})}, deep=True
    )
    return updated, note
