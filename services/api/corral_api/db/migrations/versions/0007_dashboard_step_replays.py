"""rollout_steps.replays: how often a committed step was answered from the log (the dashboard's
trajectory viewer shows it)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 21:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('rollout_steps', schema=None) as batch_op:
        batch_op.add_column(sa.Column('replays', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('rollout_steps', schema=None) as batch_op:
        batch_op.drop_column('replays')
