"""jobs: what it takes to queue a job again after Redis lost it

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 15:00:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('jobs',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('tenant', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('weight', sa.Float(), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('deleted', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_jobs_tenant'), ['tenant'], unique=False)
        batch_op.create_index(batch_op.f('ix_jobs_deleted'), ['deleted'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_deleted'))
        batch_op.drop_index(batch_op.f('ix_jobs_tenant'))
    op.drop_table('jobs')
