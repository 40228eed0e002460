"""A tiny "trainer" for the preemption tests: drives one rollout through a fixed agent loop.

    python rollout_trainer.py URL API_KEY ROLLOUT_ID STEPS SLOW_INDEX [BLOCK_AFTER]

Step i appends "step-i" to log.txt (not idempotent); step SLOW_INDEX then sleeps 3 s. After
step BLOCK_AFTER it blocks forever (so a test can kill it between steps). Prints one JSON
line per step, then a summary.
"""

import json
import sys

from corral import Corral


def main() -> None:
    url, key, rollout_id, steps, slow = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    block_after = int(sys.argv[6]) if len(sys.argv) > 6 else -1
    with Corral(url, key) as corral:
        rollout = corral.rollouts.attach(rollout_id)
        print(json.dumps({"attached": rollout.committed}), flush=True)
        for i in range(steps):
            cmd = f"echo step-{i} >> log.txt" + ("; sleep 3" if i == slow else "")
            result = rollout.exec(cmd)
            print(json.dumps({"step": i, "exit_code": result.exit_code, "replayed": rollout.replayed}), flush=True)
            if i == block_after:
                sys.stdin.read()  # blocks: the test SIGKILLs us here, between two steps
        print(json.dumps({"done": steps, "replayed": rollout.replayed}), flush=True)


if __name__ == "__main__":
    main()
