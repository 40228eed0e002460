"""fncall settings of the api (``CORRAL_FNCALL_*``), nested in ``ApiSettings.fncall``."""

from corral_common.settings import FncallSettingsBase


class FncallApiSettings(FncallSettingsBase):
    # Largest request body of one call / one batch (counted as it arrives, before it is parsed: corral_api.body_limits).
    max_body_mb: int = 32
    batch_max_body_mb: int = 256
    # Largest total of stdin + expected output + files of one call once decoded.
    max_call_payload_mb: int = 16
    # How long a call may wait in a work queue for a free worker, on top of its own limits.
    queue_wait_s: float = 60.0
    max_wait_s: float = 600.0
    # Calls of one batch in flight at once (the rest wait in the api, not in the broker).
    batch_inflight: int = 256
    # Calls of a batch sent in one AMQP message (fewer for small batches; 1 = one message per call).
    batch_bundle: int = 8
    batch_ttl_s: int = 3600
