"""What a caller's text may be, checked once where it enters: names, ids, and text a process
or a store must take as it is.

- **Names** (environments, layers, disk images): image-service's catalogue rule, one pattern
  for every service, so a name that could not have been registered is refused where it is
  given (``invalid_name``, naming the field) instead of being looked up, put into a URL or
  stored. A disk image is ``name`` or ``name:version``.
- **Ids** in bodies (``from_snapshot``, a rollout's ``sandbox_id``): what the services mint
  (``sb-<hex>``...); anything else cannot exist, and must not reach a store that cannot hold
  it (PostgreSQL text refuses NUL).
- **Process text** (exec argv, cwd, environment variables): ``execve`` takes C strings, so a
  NUL would cut them short; refused (``invalid_text``) at create and at exec alike.

Every string in a JSON body must also be encodable as UTF-8 (a lone UTF-16 surrogate such as
``"\\ud800"`` is valid JSON but no text), and no URL path or query may hold a NUL:
``corral_common.web.guards`` refuses both for every field of every service before validation.
"""

import re
from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
VERSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
REF_PATTERN = NAME_PATTERN[:-1] + ":" + VERSION_PATTERN[1:]  # name:version, both required
DISK_IMAGE_PATTERN = NAME_PATTERN[:-1] + "(:" + VERSION_PATTERN[1:-1] + ")?$"  # version optional
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"

# The codes of the checks below: the api's validation handler reports them as the error's
# code (instead of the generic ``validation_error``).
INVALID_NAME = "invalid_name"
INVALID_TEXT = "invalid_text"
INPUT_ERROR_CODES = frozenset({INVALID_NAME, INVALID_TEXT})

_NAME = re.compile(NAME_PATTERN.removesuffix("$") + r"\Z")
_DISK_IMAGE = re.compile(DISK_IMAGE_PATTERN.removesuffix("$") + r"\Z")
_ID = re.compile(ID_PATTERN.removesuffix("$") + r"\Z")

_NAME_RULE = "lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64"


def valid_name(value: str) -> str:
    """An environment (or layer) name, or "" (none given)."""
    if value and not _NAME.match(value):
        raise PydanticCustomError(INVALID_NAME, f"{value!r} is not a valid name: {_NAME_RULE}")
    return value


def valid_disk_image(value: str | None) -> str | None:
    """A disk image: ``name`` or ``name:version`` (None or "": none given)."""
    if value and not _DISK_IMAGE.match(value):
        raise PydanticCustomError(INVALID_NAME, f"{value!r} is not a valid disk image: name or name:version, "
                                                 f"the name of {_NAME_RULE}")
    return value


def valid_id(value: str | None) -> str | None:
    """A resource id given in a body (``sb-<hex>``...)."""
    if value is not None and not _ID.match(value):
        raise ValueError(f"{value!r} is not an id this service issues")
    return value


def storable_text(value: str | None) -> str | None:
    """Free text a record keeps as a column (a rollout's job_id): no NUL, which PostgreSQL
    text cannot hold."""
    if value is not None and "\0" in value:
        raise PydanticCustomError(INVALID_TEXT, "must not contain NUL characters")
    return value


def split_disk_image_ref(ref: str) -> tuple[str, str]:
    """``name`` or ``name:version`` as (name, version); version "" means the latest."""
    name, _, version = ref.partition(":")
    return name, version


def _nul_free(value: str, what: str) -> None:
    if "\0" in value:
        raise PydanticCustomError(INVALID_TEXT, f"{what} must not contain NUL characters (a process cannot be "
                                                 "given them)")


def process_args(value: Any) -> Any:
    """An exec ``cmd`` (argv list or shell string) with no NUL."""
    for arg in [value] if isinstance(value, str) else value:
        _nul_free(arg, "cmd")
    return value


def process_cwd(value: str | None) -> str | None:
    """An exec ``cwd`` with no NUL."""
    if value is not None:
        _nul_free(value, "cwd")
    return value


def env_names(value: dict[str, str]) -> dict[str, str]:
    """Environment variable names a process can be given: non-empty, without '=' or NUL, at
    most 256 characters; at most 256 of them."""
    if len(value) > 256:
        raise ValueError("at most 256 environment variables")
    for name in value:
        if not name or "=" in name or "\0" in name or len(name) > 256:
            raise ValueError(f"invalid environment variable name {name!r}")
    return value


def process_env(value: dict[str, str]) -> dict[str, str]:
    """Environment variables a process can be given: valid names (``env_names``), values
    without NUL."""
    for name, val in env_names(value).items():
        _nul_free(val, f"environment variable {name!r}")
    return value


ProcessArgs = Annotated[list[str] | str, AfterValidator(process_args)]
ProcessCwd = Annotated[str | None, AfterValidator(process_cwd)]
ProcessEnv = Annotated[dict[str, str], AfterValidator(process_env)]
