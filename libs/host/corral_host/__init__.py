"""The Linux host under the services: kernel mechanisms with no Corral policy in them, shared by
the node-agent and the memory-manager (no service imports another service's code).

- ``cgroups/``: create, cap, read and remove cgroups (v1 and v2 drivers, the node's tree);
- ``mounts``: mount(2) and umount through ctypes, mountinfo; ``mount_api``: the new mount API
  (idmapped, detached layer clones for a sandbox's overlay); ``loopdev``: loop block devices;
  ``files``: fallocate(2);
- ``namespaces``: the process's private mount namespace, and a call run in one namespace of
  another process (a fresh thread per call); ``netns``: network namespaces by file, made and
  entered by one long-lived worker thread, and sockets made inside a sandbox's; ``uts``: a
  sandbox's hostname; ``userns``: fresh user namespaces owned by a uid range's root, made by
  the helper program ``userns_main``.

Programs of their own are named ``*_main.py``; every other module runs in its caller's process.
"""
