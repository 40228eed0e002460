import re

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
