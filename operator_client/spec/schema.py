"""The JSON schema of job.yaml, generated from the model (never written by hand)."""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from .model import TrainingJob
from .units import Duration, Every, Quantity

SCHEMA_ID = "https://kctl-train.dev/schemas/trainingjob-v1alpha1.json"


class _Generator(GenerateJsonSchema):
    def encode_default(self, dft: Any) -> Any:
        # Defaults such as Quantity("8Gi") appear as the text a user would write.
        if isinstance(dft, (Duration, Every, Quantity)):
            return dft.text
        return super().encode_default(dft)


def job_schema() -> dict[str, Any]:
    """JSON schema (draft 2020-12) of a TrainingJob document, as editors and Helm use it."""
    schema = TrainingJob.model_json_schema(
        by_alias=True, mode="validation", schema_generator=_Generator
    )
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
