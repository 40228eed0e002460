"""What a sandbox may do: one module per knob, `policy.policy_for` puts them together, and
each runtime renders the result in its own terms. Nothing here imports a backend."""
