"""The ``corral`` command line (typer + rich), a thin layer over the hand-written SDK.

main.py is the app and its global options; config.py resolves url/key/profile; context.py
holds what every command shares (the client, output in human or ``--json`` form, errors and
exit codes); one module per command group (sandbox, images, env, job, rollout, fncall, nodes, admin).
"""
