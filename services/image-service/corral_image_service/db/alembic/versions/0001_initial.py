"""layers and environments

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29 00:00:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "layers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(length=71), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version", name="uq_layers_name_version"),
    )
    op.create_index("ix_layers_kind", "layers", ["kind"])
    op.create_index("ix_layers_digest", "layers", ["digest"])
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("base_layer_id", sa.Integer(), nullable=False),
        sa.Column("workspace_layer_id", sa.Integer(), nullable=True),
        sa.Column("toolkit_layer_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["base_layer_id"], ["layers.id"]),
        sa.ForeignKeyConstraint(["workspace_layer_id"], ["layers.id"]),
        sa.ForeignKeyConstraint(["toolkit_layer_id"], ["layers.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("environments")
    op.drop_index("ix_layers_digest", table_name="layers")
    op.drop_index("ix_layers_kind", table_name="layers")
    op.drop_table("layers")
