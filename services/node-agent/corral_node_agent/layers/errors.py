"""Why a layer or disk image cannot be had; the sandbox then fails with ``image_unavailable``."""

from corral_common.errors import CorralError, NotFound


class ImageUnavailable(CorralError):
    """The environment or one of its layers cannot be obtained (→ failed(image_unavailable))."""

    status_code = 502
    code = "image_unavailable"


class EnvironmentNotFound(ImageUnavailable, NotFound):
    status_code = 404
    code = "environment_not_found"


class DiskImageNotFound(ImageUnavailable, NotFound):
    status_code = 404
    code = "disk_image_not_found"
