"""disk images (VM qcow2/raw images stored in the blob store)

Revision ID: 0002_disk_images
Revises: 0001_initial
Create Date: 2026-11-29 19:00:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0002_disk_images"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "disk_images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(length=71), nullable=False),
        sa.Column("format", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("virtual_size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version", name="uq_disk_images_name_version"),
    )
    op.create_index("ix_disk_images_name", "disk_images", ["name"])
    op.create_index("ix_disk_images_digest", "disk_images", ["digest"])


def downgrade() -> None:
    op.drop_index("ix_disk_images_digest", table_name="disk_images")
    op.drop_index("ix_disk_images_name", table_name="disk_images")
    op.drop_table("disk_images")
