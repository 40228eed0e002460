"""Settings of the image-service.

Service-specific fields read ``CORRAL_IMAGE_*``; the fields shared by every service
(``CommonSettings``) keep reading ``CORRAL_*`` so one deployment-wide block still
configures them, with ``CORRAL_IMAGE_<FIELD>`` as a per-service override.
"""


from pydantic import Field
from pydantic_settings import (
    SettingsConfigDict,
)

from corral_common.settings import PrefixedServiceSettings


class ImageServiceSettings(PrefixedServiceSettings):
    model_config = SettingsConfigDict(env_prefix="CORRAL_IMAGE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8002
    data_dir: str = "/var/lib/corral/image-service"
    # Empty means SQLite in data_dir; PostgreSQL via "postgresql+psycopg://...".
    database_url: str = ""
    max_upload_mb: int = 2048
    # Bytes a layer tar or an imported image may unpack to (the files' sizes as their headers
    # claim them, counted before any is read): bigger is 413 layer_too_large.
    max_unpacked_mb: int = Field(default=8192, ge=1)
    # VM disk images (qcow2/raw, POST /v1/disk-images) are whole operating systems: their
    # own, larger bound.
    max_disk_image_mb: int = 65536
    qemu_img: str = "qemu-img"
    # OCI/Docker imports (POST /v1/imports). The registry image references are pulled from
    # ("host:port", empty: imports take archives only), whether its TLS certificate is
    # checked, and the tools: skopeo (pulls into an OCI layout), zstd (zstd layers).
    registry: str = ""
    registry_tls_verify: bool = True
    skopeo: str = "skopeo"
    zstd: str = "zstd"
    # Dev convenience: build a layer from a directory on the server. Anyone who can reach
    # the API can then read any directory the service can, so turn it off when exposed.
    allow_source_dir: bool = True
    mkfs_erofs: str = "mkfs.erofs"
    # Lazy loading: every layer blob is also cut into chunks of this size (KiB, a multiple
    # of the 4 KiB EROFS block), each stored once by digest.
    chunk_size_kb: int = Field(default=512, ge=64, le=16384, multiple_of=4)
    # Chunks and indexes; empty means <data_dir>/chunks. Any POSIX filesystem shared by all
    # image-service replicas works for a multi-node deployment.
    chunk_dir: str = ""


    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir}/images.db"

    @property
    def chunk_size_bytes(self) -> int:
        return self.chunk_size_kb * 1024

    @property
    def effective_chunk_dir(self) -> str:
        return self.chunk_dir or f"{self.data_dir}/chunks"

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024

    @property
    def max_unpacked_bytes(self) -> int:
        return self.max_unpacked_mb * 1024 * 1024

    @property
    def max_disk_image_bytes(self) -> int:
        return self.max_disk_image_mb * 1024 * 1024
