"""per-tenant layers and environments (owner), environment config and diff layers, imports

Revision ID: 0003_owners_and_imports
Revises: 0002_disk_images
Create Date: 2026-12-01 17:40:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0003_owners_and_imports"
down_revision = "0002_disk_images"
branch_labels = None
depends_on = None

# Names for constraints 0001 left unnamed (SQLite reflects them without one).
_NAMING = {"uq": "uq_%(table_name)s_%(column_0_name)s"}


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("layers", recreate="auto") as b:
        b.add_column(sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False,
                               server_default=""))
        b.drop_constraint("uq_layers_name_version", type_="unique")
        b.create_unique_constraint("uq_layers_owner_name_version", ["owner", "name", "version"])
        b.create_index("ix_layers_owner", ["owner"])
    with op.batch_alter_table("environments", recreate="auto", naming_convention=_NAMING) as b:
        b.add_column(sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False,
                               server_default=""))
        b.add_column(sa.Column("diff_layer_ids", sa.Text(), nullable=True))
        b.add_column(sa.Column("config", sa.Text(), nullable=True))
        b.drop_constraint("environments_name_key" if postgres else "uq_environments_name", type_="unique")
        b.create_unique_constraint("uq_environments_owner_name", ["owner", "name"])
        b.create_index("ix_environments_owner", ["owner"])
    op.create_table(
        "imports",
        sa.Column("id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("version", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("progress", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_imports_owner", "imports", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_imports_owner", table_name="imports")
    op.drop_table("imports")
    with op.batch_alter_table("environments") as b:
        b.drop_index("ix_environments_owner")
        b.drop_constraint("uq_environments_owner_name", type_="unique")
        b.create_unique_constraint("uq_environments_name", ["name"])
        b.drop_column("config")
        b.drop_column("diff_layer_ids")
        b.drop_column("owner")
    with op.batch_alter_table("layers") as b:
        b.drop_index("ix_layers_owner")
        b.drop_constraint("uq_layers_owner_name_version", type_="unique")
        b.create_unique_constraint("uq_layers_name_version", ["name", "version"])
        b.drop_column("owner")
