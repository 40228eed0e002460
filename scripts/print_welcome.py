"""Print where Corral answers and a command that works, after `make up`."""

import json
import sys

info = json.load(open(sys.argv[1]))
api, key = info["api"], info["api_key"]
print(f"""
Corral is up.  State, logs and pid files: {info['state_dir']}
  API docs:   {api}/docs
  API key:    {key}     (tenant {info['tenant']!r}; also in {info['state_dir']}/api-key)
  Operator:   {info.get('operator_key', '-')}     (for /v1/admin/*, docs/admin.md; also in {info['state_dir']}/operator-key)

Try it:
  curl -s -X POST '{api}/v1/sandboxes?wait_for=running' -H 'Authorization: Bearer {key}' \\
       -H 'content-type: application/json' -d '{{"environment": "busybox"}}'
  curl -s -X POST {api}/v1/sandboxes/<id>/exec -H 'Authorization: Bearer {key}' \\
       -H 'content-type: application/json' -d '{{"cmd": "echo hello from $(hostname)"}}'

Or with the SDK:
  CORRAL_URL={api} CORRAL_API_KEY={key} .venv/bin/python examples/quickstart.py

Stop everything with: make down
""")
