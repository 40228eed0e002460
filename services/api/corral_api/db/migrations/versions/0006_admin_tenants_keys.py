"""tenants (with quotas) and api_keys.id/name/role/prefix/revoked_at (issue 15, administration)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 21:00:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('tenants',
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.Column('disabled', sa.Boolean(), nullable=False),
    sa.Column('quotas', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('name')
    )
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))
        batch_op.add_column(sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False,
                                      server_default=''))
        batch_op.add_column(sa.Column('role', sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False,
                                      server_default='tenant'))
        batch_op.add_column(sa.Column('prefix', sqlmodel.sql.sqltypes.AutoString(length=8), nullable=False,
                                      server_default=''))
        batch_op.add_column(sa.Column('revoked_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True))
    # Keys made before this revision get an id derived from their hash (stable, reveals nothing usable).
    op.execute("UPDATE api_keys SET id = 'key-' || substr(key_hash, 1, 16) WHERE id IS NULL")
    # Their tenants become rows (unlimited quotas).
    op.execute("INSERT INTO tenants (name, created_at, disabled, quotas) "
               "SELECT tenant, min(created_at), false, '{}' FROM api_keys GROUP BY tenant")
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.alter_column('id', existing_type=sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False)
        batch_op.create_index('ix_api_keys_id', ['id'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_index('ix_api_keys_id')
        batch_op.drop_column('revoked_at')
        batch_op.drop_column('prefix')
        batch_op.drop_column('role')
        batch_op.drop_column('name')
        batch_op.drop_column('id')
    op.drop_table('tenants')
