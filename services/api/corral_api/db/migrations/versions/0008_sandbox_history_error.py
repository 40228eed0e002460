"""sandbox_history.error: why a sandbox failed, in words (its reason is the code)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 15:00:00
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sandbox_history', schema=None) as batch_op:
        batch_op.add_column(sa.Column('error', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sandbox_history', schema=None) as batch_op:
        batch_op.drop_column('error')
