"""rollout_steps.request_key: steps named by the caller's idempotency key (SWE-ReX X-Request-ID)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 17:30:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('rollout_steps', schema=None) as batch_op:
        batch_op.add_column(sa.Column('request_key', sqlmodel.sql.sqltypes.AutoString(length=128), nullable=True))
        batch_op.create_index('ux_rollout_steps_request_key', ['rollout_id', 'request_key'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('rollout_steps', schema=None) as batch_op:
        batch_op.drop_index('ux_rollout_steps_request_key')
        batch_op.drop_column('request_key')
