"""snapshots, and how a sandbox ran (sandbox_history.runtime)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 19:20:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('snapshots',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tenant', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('sandbox_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('node_id', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('backend', sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
    sa.Column('environment', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('disk_image', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.Column('memory_mb', sa.Integer(), nullable=False),
    sa.Column('cpu', sa.Float(), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('created_at', sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.create_index('ix_snapshots_tenant_created', ['tenant', 'created_at'], unique=False)
    with op.batch_alter_table('sandbox_history', schema=None) as batch_op:
        batch_op.add_column(sa.Column('runtime', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sandbox_history', schema=None) as batch_op:
        batch_op.drop_column('runtime')
    with op.batch_alter_table('snapshots', schema=None) as batch_op:
        batch_op.drop_index('ix_snapshots_tenant_created')
    op.drop_table('snapshots')
