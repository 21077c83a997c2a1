"""Image builds: the user's workspace on a trainer image, content-addressed, pushed and
pinned by digest (`kctl-train build`, `Client.build`)."""

from .pipeline import BuildRequest, BuiltImage, build_image

__all__ = ["BuildRequest", "BuiltImage", "build_image"]
